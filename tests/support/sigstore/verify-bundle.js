// Finds an image digest's Sigstore bundles as a verifier does (the referrers tag schema's index
// `sha256-<hex>`, then each referrer manifest and its bundle layer, over HTTP from the registry)
// and verifies each with Sigstore's own JavaScript verifier (@sigstore/bundle, @sigstore/verify)
// given the public key and no transparency log, CT log or timestamp authority. Then checks what
// cosign checks of a bundle for an image: the signed in-toto Statement is cosign's sign predicate
// (or, for an attestation's bundle, SLSA provenance or OpenVEX) and its subject is the expected
// digest.
//
// node verify-bundle.js REGISTRY_URL REPOSITORY SUBJECT_DIGEST PUBLIC_KEY_PEM EXPECTED_DIGEST [forge]
// `forge`: the bundle's payload is swapped for a Statement naming EXPECTED_DIGEST, keeping the
// signature (must fail: the signature binds the Statement, so the digest).
// Prints {"referrers":N,"verified":N} and exits 0, or prints the reason and exits 1.
'use strict';
const crypto = require('crypto');
const fs = require('fs');
const { bundleFromJSON } = require('@sigstore/bundle');
const { Verifier, toSignedEntity, toTrustMaterial } = require('@sigstore/verify');

const BUNDLE = 'application/vnd.dev.sigstore.bundle.v0.3+json';
// The image signature's, and the attestations' builder-monitor writes.
const PREDICATES = ['https://sigstore.dev/cosign/sign/v1', 'https://slsa.dev/provenance/v1', 'https://openvex.dev/ns/v0.2.0'];
const ACCEPT = 'application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json';
const [base, repository, subject, keyPath, expected, mode] = process.argv.slice(2);

async function get(path, accept) {
  const response = await fetch(`${base}/v2/${repository}/${path}`, { headers: accept ? { Accept: accept } : {} });
  if (!response.ok) throw new Error(`GET ${path}: HTTP ${response.status}`);
  return Buffer.from(await response.arrayBuffer());
}

const sha256 = (bytes) => 'sha256:' + crypto.createHash('sha256').update(bytes).digest('hex');

async function main() {
  const pem = fs.readFileSync(keyPath);
  const publicKey = crypto.createPublicKey(pem);
  const hint = crypto.createHash('sha256').update(publicKey.export({ type: 'spki', format: 'der' })).digest('base64');
  const noRoot = { mediaType: '', certificateAuthorities: [], ctlogs: [], tlogs: [], timestampAuthorities: [] };
  const trust = toTrustMaterial(noRoot, (h) => {
    if (h !== hint) throw new Error(`bundle names key hint ${h}, not the given key's ${hint}`);
    return { publicKey, validFor: () => true };
  });
  const verifier = new Verifier(trust, { tlogThreshold: 0, ctlogThreshold: 0, timestampThreshold: 0 });

  const index = JSON.parse(await get(`manifests/${subject.replace(':', '-')}`, ACCEPT));
  const referrers = index.manifests.filter((m) => m.artifactType === BUNDLE);
  let verified = 0;
  for (const descriptor of referrers) {
    const raw = await get(`manifests/${descriptor.digest}`, ACCEPT);
    if (sha256(raw) !== descriptor.digest) throw new Error(`manifest ${descriptor.digest} hashes to ${sha256(raw)}`);
    const manifest = JSON.parse(raw);
    if (manifest.subject.digest !== subject) throw new Error(`referrer's subject is ${manifest.subject.digest}`);
    if (manifest.layers.length !== 1 || manifest.layers[0].mediaType !== BUNDLE) throw new Error('not one bundle layer');
    const blob = await get(`blobs/${manifest.layers[0].digest}`);
    if (sha256(blob) !== manifest.layers[0].digest) throw new Error('bundle blob does not hash to its digest');
    const json = JSON.parse(blob);
    if (mode === 'forge') {
      const statement = JSON.parse(Buffer.from(json.dsseEnvelope.payload, 'base64'));
      statement.subject[0].digest.sha256 = expected.replace('sha256:', '');
      json.dsseEnvelope.payload = Buffer.from(JSON.stringify(statement)).toString('base64');
    }
    const bundle = bundleFromJSON(json);
    verifier.verify(toSignedEntity(bundle));
    const statement = JSON.parse(bundle.content.dsseEnvelope.payload);
    if (bundle.content.dsseEnvelope.payloadType !== 'application/vnd.in-toto+json') throw new Error('not in-toto');
    if (!PREDICATES.includes(statement.predicateType)) throw new Error(`predicate ${statement.predicateType}`);
    const digests = statement.subject.map((s) => 'sha256:' + s.digest.sha256);
    if (!digests.includes(expected)) throw new Error(`the signed statement is about ${digests}, not ${expected}`);
    verified += 1;
  }
  if (verified === 0) throw new Error(`no bundle referrer of ${subject} in its referrers index`);
  console.log(JSON.stringify({ referrers: referrers.length, verified, entries: index.manifests.length }));
}

main().catch((e) => {
  console.log(`verification failed: ${e.message}`);
  process.exit(1);
});
