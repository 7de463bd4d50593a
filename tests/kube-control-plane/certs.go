package main

// The control plane's own trust: a CA, the apiserver's serving certificate signed by it, the
// service-account signing key and the static bearer token of the admin user. All are made fresh
// at every start, so nothing secret outlives the run in a form another run would trust.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// credentials are the files the apiserver is started with, and what the kubeconfig needs.
type credentials struct {
	caPEM          []byte // the CA certificate, inlined into the kubeconfig
	caFile         string
	certFile       string // serving certificate (SAN IP 127.0.0.1, DNS localhost)
	keyFile        string
	saKeyFile      string // service-account signing key (private; the public half is derived)
	tokenFile      string // --token-auth-file: the admin user's static bearer token
	adminToken     string
	kubeconfigPath string
}

// makeCredentials writes everything under dir/pki with owner-only permissions.
func makeCredentials(dir string) (*credentials, error) {
	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return nil, err
	}
	c := &credentials{
		caFile:         filepath.Join(pki, "ca.crt"),
		certFile:       filepath.Join(pki, "apiserver.crt"),
		keyFile:        filepath.Join(pki, "apiserver.key"),
		saKeyFile:      filepath.Join(pki, "service-account.key"),
		tokenFile:      filepath.Join(pki, "tokens.csv"),
		kubeconfigPath: filepath.Join(dir, "admin.kubeconfig"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "kube-control-plane test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, caCert, err := sign(caTemplate, nil, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	c.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})

	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	leafTemplate := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	leafDER, _, err := sign(leafTemplate, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return nil, err
	}
	c.adminToken = hex.EncodeToString(token)

	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER})
	leafKeyPEM, err := ecKeyPEM(leafKey)
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := ecKeyPEM(saKey)
	if err != nil {
		return nil, err
	}
	// token,user,uid,"groups": system:masters bypasses RBAC, as a cluster admin's credentials do.
	tokens := fmt.Sprintf("%s,admin,admin-uid,\"system:masters\"\n", c.adminToken)
	for path, data := range map[string][]byte{
		c.caFile: c.caPEM, c.certFile: leafPEM, c.keyFile: leafKeyPEM, c.saKeyFile: saKeyPEM,
		c.tokenFile: []byte(tokens),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// sign makes a certificate from template, signed by parent (self-signed when parent is nil).
func sign(template, parent *x509.Certificate, pub *ecdsa.PublicKey, signer *ecdsa.PrivateKey) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	template.SerialNumber = serial
	if parent == nil {
		parent = template
	}
	der, err := x509.CreateCertificate(rand.Reader, template, parent, pub, signer)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return der, cert, err
}

func ecKeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
