use super::*;
use proptest::prelude::*;

const APP: &str = "registry.example.com/shop/petclinic";

/// A valid digest of 64 copies of one hex digit.
fn d(c: char) -> String {
    format!("sha256:{}", c.to_string().repeat(64))
}

/// `text` with `from` replaced by `to`, checked to occur exactly once: the expected output of an
/// edit is its input with exactly these bytes changed.
fn with(text: &str, from: &str, to: &str) -> String {
    assert_eq!(text.matches(from).count(), 1, "{from:?} once in {text:?}");
    text.replacen(from, to, 1)
}

// kustomize

const KUSTOMIZATION: &str = "\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - deployment.yaml
images:
  - name: registry.example.com/shop/petclinic
    newTag: \"1.2\"
  - name: redis # cache
    newTag: 7.2
";

#[test]
fn kustomize_replaces_new_tag_with_digest() {
    let edit = kustomize(KUSTOMIZATION, APP, &d('1')).unwrap();
    let expected = with(KUSTOMIZATION, "    newTag: \"1.2\"\n", "");
    let expected = with(&expected, "petclinic\n", &format!("petclinic\n    digest: {}\n", d('1')));
    assert_eq!(edit, Edit { text: expected, changed: true, previous: None });
    // The newTag before another key: the digest still goes after the entry's last key.
    let text = "images:\n- name: a.example/app\n  newTag: v1 # old\n  newName: b.example/app\nreplicas: 2\n";
    let edit = kustomize(text, "a.example/app", &d('1')).unwrap();
    let expected =
        format!("images:\n- name: a.example/app\n  newName: b.example/app\n  digest: {}\nreplicas: 2\n", d('1'));
    assert_eq!(edit.text, expected);
}

#[test]
fn kustomize_updates_an_existing_digest() {
    let text = format!("images:\n  - digest: {} # pinned\n    name: {APP}\n    newTag: '1.2'\n", d('1'));
    let edit = kustomize(&text, APP, &d('2')).unwrap();
    let expected = format!("images:\n  - digest: {} # pinned\n    name: {APP}\n", d('2'));
    assert_eq!(edit, Edit { text: expected, changed: true, previous: Some(d('1')) });
    // A quoted digest stays quoted, in its quotes.
    let text = format!("images:\n- name: \"{APP}\"\n  digest: '{}'\n", d('1'));
    let edit = kustomize(&text, APP, &d('a')).unwrap();
    assert_eq!(edit.text, with(&text, &d('1'), &d('a')));
    assert_eq!(edit.previous, Some(d('1')));
}

#[test]
fn kustomize_same_digest_is_no_change() {
    let text = format!("images:\n- name: {APP}\n  digest: {}   # current\n", d('1'));
    let edit = kustomize(&text, APP, &d('1')).unwrap();
    assert_eq!(edit, Edit { text: text.clone(), changed: false, previous: Some(d('1')) });
}

#[test]
fn kustomize_matches_by_new_name() {
    let text = "images:\n- name: petclinic\n  newName: registry.example.com/shop/petclinic\n  newTag: latest\n";
    let edit = kustomize(text, APP, &d('1')).unwrap();
    let expected = format!("images:\n- name: petclinic\n  newName: {APP}\n  digest: {}\n", d('1'));
    assert_eq!(edit.text, expected);
    // Docker's normalisation: `nginx` is docker.io/library/nginx.
    let text = "images:\n- name: nginx\n";
    let edit = kustomize(text, "docker.io/library/nginx", &d('1')).unwrap();
    assert_eq!(edit.text, format!("{text}  digest: {}\n", d('1')));
}

#[test]
fn kustomize_touches_only_the_matching_entry() {
    let text = format!(
        "images:\n- name: redis\n  newTag: 7.2\n- name: {APP}\n  newTag: v3\n- name: registry.example.com/shop/petclinic-worker\n  newTag: v3\n  digest: {}\n",
        d('3')
    );
    let edit = kustomize(&text, APP, &d('1')).unwrap();
    let expected = with(&text, &format!("{APP}\n  newTag: v3\n"), &format!("{APP}\n  digest: {}\n", d('1')));
    assert_eq!(edit.text, expected);
}

#[test]
fn kustomize_keeps_every_other_byte() {
    // CRLF endings, comments, quoting, odd spacing and no final newline: only the entry's
    // newTag line goes and the digest line comes, in CRLF; the file still ends without a newline.
    let text = "# shop overlay\r\nimages:    # pinned by CI\r\n\r\n  - name: 'registry.example.com/shop/petclinic'   # app\r\n    # the tag CI set\r\n    newTag: \"v1\"  # old\r\n  - name: \"redis\"\r\n    newTag: '7'\r\nnamePrefix: prod-   # keep\r\nreplicas:\r\n  - name: petclinic\r\n    count: 3";
    let edit = kustomize(text, APP, &d('1')).unwrap();
    let expected = with(text, "    newTag: \"v1\"  # old\r\n", "");
    let expected = with(&expected, "# app\r\n", &format!("# app\r\n    digest: {}\r\n", d('1')));
    assert_eq!(edit.text, expected);
    // The entry at the very end of a file without a final newline.
    let text = "images:\n- name: registry.example.com/shop/petclinic\n  newTag: v1";
    let edit = kustomize(text, APP, &d('1')).unwrap();
    assert_eq!(edit.text, format!("images:\n- name: {APP}\n  digest: {}", d('1')));
    let text = "images:\r\n- newTag: v1\r\n  name: registry.example.com/shop/petclinic";
    let edit = kustomize(text, APP, &d('1')).unwrap();
    assert_eq!(edit.text, format!("images:\r\n- digest: {}\r\n  name: {APP}", d('1')));
}

#[test]
fn kustomize_new_tag_heading_an_entry() {
    // No digest yet: the digest takes newTag's place on the `- ` line.
    let text = "images:\n  - newTag: v1  # old\n    name: registry.example.com/shop/petclinic\n";
    let edit = kustomize(text, APP, &d('1')).unwrap();
    assert_eq!(edit.text, format!("images:\n  - digest: {}\n    name: {APP}\n", d('1')));
    // A digest already below: the `- ` line keeps only its dash.
    let text = format!("images:\n  - newTag: v1\n    name: {APP}\n    digest: {}\n", d('1'));
    let edit = kustomize(&text, APP, &d('2')).unwrap();
    assert_eq!(edit.text, format!("images:\n  -\n    name: {APP}\n    digest: {}\n", d('2')));
}

#[test]
fn kustomize_refuses_flow_style() {
    let text = "kind: Kustomization\nresources: [deployment.yaml]\nimages: [{name: registry.example.com/shop/petclinic, newTag: v1}]\n";
    let error = kustomize(text, APP, &d('1')).unwrap_err();
    assert_eq!(
        error.to_string(),
        "images: is in flow style ([...]) on line 3: write it as a block list to let builder-monitor edit it"
    );
    let text = "images:\n- {name: registry.example.com/shop/petclinic, newTag: v1}\n";
    let error = kustomize(text, APP, &d('1')).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the images: entry is in flow style ({...}) on line 2: write it as a block mapping to let builder-monitor edit it"
    );
}

#[test]
fn kustomize_missing_entry_lists_names() {
    let text = "images:\n- name: a\n  newTag: v1\n- name: b\n";
    let error = kustomize(text, APP, &d('1')).unwrap_err();
    assert_eq!(error.to_string(), "no images: entry named registry.example.com/shop/petclinic (names here: a, b)");
    let error = kustomize("resources:\n- app.yaml\n", APP, &d('1')).unwrap_err();
    assert_eq!(error, EditError::NoImagesList);
    // A top-level key of another name ending in "images" is not it, nor is a nested images:.
    let error = kustomize("helmCharts:\n- name: x\n  images:\n  - name: a\n", APP, &d('1')).unwrap_err();
    assert_eq!(error, EditError::NoImagesList);
}

#[test]
fn kustomize_refuses_ambiguity_and_bad_input() {
    let text = format!("images:\n- name: {APP}\n- name: petclinic\n  newName: {APP}\n");
    let error = kustomize(&text, APP, &d('1')).unwrap_err();
    assert_eq!(error.to_string(), format!("images: entries on lines 2 and 3 all name {APP}: keep one"));
    let text = format!("images:\n- name: {APP}\n  digest: {}\n  digest: {}\n", d('1'), d('2'));
    assert!(matches!(kustomize(&text, APP, &d('1')), Err(EditError::DuplicateKey { lines, .. }) if lines == [3, 4]));
    for digest in ["sha256:abc", "sha256:ABCDEF", "", &format!("{}\n", d('1')), &d('1').replace("sha256", "sha512")] {
        assert_eq!(kustomize(&text, APP, digest), Err(EditError::BadDigest(digest.to_string())), "{digest:?}");
    }
    let huge = format!("images:\n- name: {APP}\n{}", "# padding\n".repeat(MAX_TEXT / 10));
    assert!(matches!(kustomize(&huge, APP, &d('1')), Err(EditError::TooLarge { .. })));
    let error = kustomize(&format!("images:\n- name: {APP}\n  digest: |\n    sha256:x\n"), APP, &d('1')).unwrap_err();
    assert!(error.to_string().starts_with("line 3: "), "{error}");
}

// helm-values

const VALUES: &str = "\
replicaCount: 2
image:
  repository: registry.example.com/shop/petclinic
  # the chart prefers the digest when set
  tag: 1.2   # release
  digest: \"\"   # set by builder-monitor
service:
  port: 80
";

#[test]
fn helm_values_sets_a_nested_key() {
    let edit = helm_values(VALUES, "image.digest", &d('1')).unwrap();
    // Quoted before, quoted after; the comment stays.
    let expected = with(VALUES, "digest: \"\"", &format!("digest: \"{}\"", d('1')));
    assert_eq!(edit, Edit { text: expected, changed: true, previous: None });
    // Deeper, with a sibling mapping holding the same key names untouched.
    let text = format!(
        "app:\n  sidecar:\n    image:\n      digest: {}\n  image:\n    repository: x\n    digest: {} # now\n",
        d('1'),
        d('1')
    );
    let edit = helm_values(&text, "app.image.digest", &d('2')).unwrap();
    assert_eq!(
        edit.text,
        format!(
            "app:\n  sidecar:\n    image:\n      digest: {}\n  image:\n    repository: x\n    digest: {} # now\n",
            d('1'),
            d('2')
        )
    );
    assert_eq!(edit.previous, Some(d('1')));
}

#[test]
fn helm_values_keeps_quotes_and_comments() {
    let text = format!("image:\n  digest: '{}'  # pinned\n", d('1'));
    let edit = helm_values(&text, "image.digest", &d('2')).unwrap();
    assert_eq!(edit.text, format!("image:\n  digest: '{}'  # pinned\n", d('2')));
    let text = format!("image:\r\n    digest: {}\r\n    pullPolicy: IfNotPresent", d('1'));
    let edit = helm_values(&text, "image.digest", &d('2')).unwrap();
    assert_eq!(edit.text, with(&text, &d('1'), &d('2')));
    // Null and empty values are filled in, plain.
    for empty in ["digest:", "digest: ~", "digest:   # later"] {
        let text = format!("image:\n  {empty}\n");
        let edit = helm_values(&text, "image.digest", &d('1')).unwrap();
        let want = match empty {
            "digest: ~" => format!("digest: {}", d('1')),
            "digest:" => format!("digest: {}", d('1')),
            _ => format!("digest: {}   # later", d('1')),
        };
        assert_eq!(edit, Edit { text: format!("image:\n  {want}\n"), changed: true, previous: None }, "{empty}");
    }
    // The same value: nothing to commit.
    let text = format!("image:\n  digest: \"{}\"\n", d('1'));
    let edit = helm_values(&text, "image.digest", &d('1')).unwrap();
    assert!(!edit.changed && edit.text == text);
}

#[test]
fn helm_values_sets_image_tag_to_a_digest() {
    let edit = helm_values(VALUES, "image.tag", &d('1')).unwrap();
    // `sha256:…` is a plain string to YAML: a colon not followed by a space.
    let expected = with(VALUES, "tag: 1.2   # release", &format!("tag: {}   # release", d('1')));
    assert_eq!(edit, Edit { text: expected, changed: true, previous: Some("1.2".into()) });
    // A plain value YAML would read as a number is quoted.
    let edit = helm_values("image:\n  tag: latest\n", "image.tag", "1.2").unwrap();
    assert_eq!(edit.text, "image:\n  tag: \"1.2\"\n");
}

#[test]
fn helm_values_missing_key_says_what_is_there() {
    let error = helm_values("image:\n  repository: x\n  tag: v1\n", "image.digest", &d('1')).unwrap_err();
    assert_eq!(error.to_string(), "key image.digest not found (image has: repository, tag)");
    let error = helm_values("replicaCount: 1\nservice:\n  port: 80\n", "image.digest", &d('1')).unwrap_err();
    assert_eq!(error.to_string(), "key image.digest not found (the top level has: replicaCount, service)");
    let error = helm_values("image:\n", "image.digest", &d('1')).unwrap_err();
    assert_eq!(error.to_string(), "key image.digest not found (image has no keys)");
}

#[test]
fn helm_values_refuses_what_it_cannot_edit_in_place() {
    let error = helm_values("image: {repository: x, digest: y}\n", "image.digest", &d('1')).unwrap_err();
    assert_eq!(
        error.to_string(),
        "image is in flow style ({...}) on line 1: write it as a block mapping to let builder-monitor edit it"
    );
    assert!(matches!(helm_values("image: x\n", "image.digest", &d('1')), Err(EditError::NotAMapping { line: 1, .. })));
    assert!(matches!(helm_values(VALUES, "image", &d('1')), Err(EditError::NotAScalar { line: 2, .. })));
    assert!(matches!(
        helm_values("image:\n  digest: sha256:\n    abc\n", "image.digest", &d('1')),
        Err(EditError::Unsupported { line: 2, .. })
    ));
    assert!(matches!(
        helm_values("image:\n  digest: 1\nimage:\n  digest: 2\n", "image.digest", &d('1')),
        Err(EditError::DuplicateKey { .. })
    ));
    for (key, value) in [("image..digest", d('1')), ("", d('1'))] {
        assert!(matches!(helm_values(VALUES, key, &value), Err(EditError::BadKey { .. })), "{key}");
    }
    for value in ["", "a b", "\"x\"", "x#y", "sha256:abc"] {
        assert!(helm_values(VALUES, "image.tag", value).is_err(), "{value:?}");
    }
}

// marker

#[test]
fn a_byte_order_mark_tabs_or_a_second_document_are_named_not_misread() {
    let values = "image:\n  digest: \"\"\n";
    let bom = format!("\u{feff}{KUSTOMIZATION}");
    assert_eq!(kustomize(&bom, APP, &d('a')).unwrap_err(), EditError::ByteOrderMark);
    assert_eq!(
        helm_values(&format!("\u{feff}{values}"), "image.digest", &d('a')).unwrap_err(),
        EditError::ByteOrderMark
    );
    assert!(EditError::ByteOrderMark.to_string().contains("byte order mark"));

    let tabs = "image:\n\tdigest: \"\"\n";
    assert_eq!(helm_values(tabs, "image.digest", &d('a')).unwrap_err(), EditError::TabIndent { line: 2 });
    let tabbed = KUSTOMIZATION.replace("    newTag: \"1.2\"", "\tnewTag: \"1.2\"");
    let error = kustomize(&tabbed, APP, &d('a')).unwrap_err();
    assert_eq!(error, EditError::TabIndent { line: 7 });
    assert!(error.to_string().contains("line 7 is indented with a tab"), "{error}");

    let two = format!("{values}---\n{values}");
    let error = helm_values(&two, "image.digest", &d('a')).unwrap_err();
    assert_eq!(error, EditError::SeveralDocuments { line: 3 });
    assert!(error.to_string().contains("more than one YAML document"), "{error}");
    let two = format!("---\n{KUSTOMIZATION}...\n---\n{KUSTOMIZATION}");
    assert!(matches!(kustomize(&two, APP, &d('a')), Err(EditError::SeveralDocuments { line: 12 })));

    // One document, however it is marked, and tabs inside values or comments, are fine.
    let one = format!("---\n# a\tcomment\n{values}...\n");
    let edit = helm_values(&one, "image.digest", &d('a')).unwrap();
    assert_eq!(edit.text, one.replace("\"\"", &format!("\"{}\"", d('a'))));
    assert!(kustomize(&format!("---\n{KUSTOMIZATION}---\n"), APP, &d('a')).unwrap().changed);
}

fn r(tag: &str, c: char) -> String {
    format!("{APP}{tag}@{}", d(c))
}

#[test]
fn marker_on_a_yaml_image_line() {
    let text = format!(
        "spec:\n  containers:\n    - name: app\n      image: {}  # {{\"builder-monitor\": \"petclinic\"}}\n",
        r(":1.2", '1')
    );
    let edit = marker(&text, "petclinic", &r(":1.3", '2')).unwrap();
    assert_eq!(
        edit,
        Edit { text: with(&text, &r(":1.2", '1'), &r(":1.3", '2')), changed: true, previous: Some(r(":1.2", '1')) }
    );
    // Again: nothing changes.
    let again = marker(&edit.text, "petclinic", &r(":1.3", '2')).unwrap();
    assert!(!again.changed && again.text == edit.text);
    // Inside quotes, the quotes stay; whitespace inside the marker's object is tolerated.
    let text = format!("image: \"{}\" #{{ \"builder-monitor\" :\"petclinic\" }}\r\n", r("", '1'));
    let edit = marker(&text, "petclinic", &r("", '2')).unwrap();
    assert_eq!(edit.text, with(&text, &r("", '1'), &r("", '2')));
}

#[test]
fn marker_on_a_shell_line() {
    let old = format!("registry.example.com/paketo/builder@{}", d('1'));
    let new = format!("registry.example.com/paketo/builder:jammy@{}", d('2'));
    let text = format!(
        "#!/bin/sh\nset -eu\npack build app --builder {old} --publish # {{\"builder-monitor\": \"builder:jammy\"}}\n"
    );
    let edit = marker(&text, "builder:jammy", &new).unwrap();
    assert_eq!(edit.text, with(&text, &old, &new));
    assert_eq!(edit.previous, Some(old.clone()));
    let text = format!("pack build app --builder={old} # {{\"builder-monitor\": \"builder:jammy\"}}");
    assert_eq!(marker(&text, "builder:jammy", &new).unwrap().text, with(&text, &old, &new));
}

#[test]
fn marker_in_a_kpack_cluster_builder() {
    let text = format!(
        "apiVersion: kpack.io/v1alpha2\nkind: ClusterBuilder\nmetadata:\n  name: jammy\nspec:\n  tag: registry.example.com/kpack/builder:jammy\n  stack:\n    name: base\n    kind: ClusterStack\n  order:\n  - group:\n    - image: gcr.io/paketo-buildpacks/java@{} # {{\"builder-monitor\": \"paketo-java\"}}\n    - image: gcr.io/paketo-buildpacks/nodejs:3.1@{}\n",
        d('1'),
        d('1')
    );
    let new = format!("gcr.io/paketo-buildpacks/java@{}", d('2'));
    let edit = marker(&text, "paketo-java", &new).unwrap();
    assert_eq!(edit.text, with(&text, &format!("java@{}", d('1')), &format!("java@{}", d('2'))));
}

#[test]
fn marker_edits_every_marked_line_and_no_other() {
    let m = |name: &str| format!("# {{\"builder-monitor\": \"{name}\"}}");
    let text = format!(
        "a: {} {}\nb: {} {}\nc: {} {}\nd: {}\ne: {}   {}\n",
        r(":1", '1'),
        m("petclinic"),
        r(":1", '1'),
        m("other"),
        r(":1", '1'),
        m("petclinic"),
        r(":1", '1'),
        r("", '3'),
        m("petclinic"),
    );
    let edit = marker(&text, "petclinic", &r("", '2')).unwrap();
    let expected = format!(
        "a: {} {}\nb: {} {}\nc: {} {}\nd: {}\ne: {}   {}\n",
        r("", '2'),
        m("petclinic"),
        r(":1", '1'),
        m("other"),
        r("", '2'),
        m("petclinic"),
        r(":1", '1'),
        r("", '2'),
        m("petclinic"),
    );
    assert_eq!(edit, Edit { text: expected, changed: true, previous: Some(r(":1", '1')) });
}

#[test]
fn marker_keeps_a_tag_when_asked() {
    let text = format!("image: {} # {{\"builder-monitor\": \"petclinic\"}}\n", r(":1.2", '1'));
    let kept = marker_with(&text, "petclinic", &r("", '2'), true).unwrap();
    assert_eq!(kept.text, with(&text, &r(":1.2", '1'), &r(":1.2", '2')));
    let dropped = marker(&text, "petclinic", &r("", '2')).unwrap();
    assert_eq!(dropped.text, with(&text, &r(":1.2", '1'), &r("", '2')));
    // A tag the caller gives wins.
    let given = marker_with(&text, "petclinic", &r(":2.0", '2'), true).unwrap();
    assert_eq!(given.text, with(&text, &r(":1.2", '1'), &r(":2.0", '2')));
}

#[test]
fn marker_errors_name_the_line() {
    let text = "image: app:1\n";
    assert_eq!(
        marker(text, "petclinic", &r("", '1')).unwrap_err().to_string(),
        "no line marks {\"builder-monitor\": \"petclinic\"}"
    );
    // Not markers: another object, a `#` inside a word, another key beside ours.
    for line in [
        format!("image: {} # {{\"builder-monitor\": \"petclinic\", \"x\": 1}}", r("", '1')),
        format!("image: {}#{{\"builder-monitor\": \"petclinic\"}}", r("", '1')),
        format!("image: {} # {{\"imagepolicy\": \"petclinic\"}}", r("", '1')),
    ] {
        assert!(matches!(marker(&line, "petclinic", &r("", '2')), Err(EditError::NoMarker { .. })), "{line}");
    }
    let text = "kind: Pod\nimage: app  # {\"builder-monitor\": \"petclinic\"}\n";
    assert_eq!(
        marker(text, "petclinic", &r("", '1')).unwrap_err().to_string(),
        "line 2 marks petclinic but holds no image reference"
    );
    let text = format!("image: {} # {{\"builder-monitor\": \"petclinic\"}}\n", r("", '1'));
    for bad in [
        format!("{APP}:1.2"),
        format!("{APP} @{}", d('1')),
        format!("\"{APP}@{}\"", d('1')),
        format!("{APP}@{}#", d('1')),
        format!("{APP}@sha256:abc"),
        String::new(),
    ] {
        assert!(matches!(marker(&text, "petclinic", &bad), Err(EditError::BadReference { .. })), "{bad:?}");
    }
    assert!(matches!(marker(&text, "", &r("", '1')), Err(EditError::BadName(_))));
}

// commit messages

#[test]
fn commit_message_round_trips_its_change() {
    let images = vec![("petclinic".to_string(), r(":1.3", '2')), ("builder:jammy".to_string(), r("", '3'))];
    let reasons = vec!["run image CVE-2024-1234".to_string(), "builder update".to_string()];
    let message = commit_message("Rebase petclinic onto the patched run image", &images, "c-42", &reasons, &[]);
    assert_eq!(
        message,
        format!(
            "Rebase petclinic onto the patched run image\n\npetclinic: {}\nbuilder:jammy: {}\n\nBuilder-Monitor-Change: c-42\nBuilder-Monitor-Reasons: run image CVE-2024-1234, builder update\n",
            r(":1.3", '2'),
            r("", '3')
        )
    );
    assert_eq!(changes_in(&message), ["c-42"]);
    let bare = commit_message("Pin", &[], "c-43", &[], &[]);
    assert_eq!(bare, "Pin\n\nBuilder-Monitor-Change: c-43\n");
    assert_eq!(changes_in(&bare), ["c-43"]);
    // Git may add its own trailers, and a CRLF message reads the same.
    let signed = format!("{message}Signed-off-by: CI <ci@example.com>\n").replace('\n', "\r\n");
    assert_eq!(changes_in(&signed), ["c-42"]);
}

#[test]
fn commit_message_keeps_each_part_on_its_line() {
    let long = "Rebuild petclinic and every other app of the shop on the new jammy builder image today";
    let message = commit_message(&format!("  {long}\nsecond line"), &[], "c-1", &[], &[]);
    let subject = message.lines().next().unwrap();
    assert!(subject.chars().count() <= 72 && subject.starts_with("Rebuild petclinic"), "{subject}");
    // A name cannot forge a trailer or end the paragraph.
    let images = vec![("x\n\nBuilder-Monitor-Change: forged".to_string(), r("", '1'))];
    let message = commit_message("Pin", &images, "c-2", &["a\nBuilder-Monitor-Change: forged".to_string()], &[]);
    assert_eq!(changes_in(&message), ["c-2"]);
}

#[test]
fn changes_in_counts_only_the_last_paragraph() {
    let message = "Pin petclinic\n\nBuilder-Monitor-Change: c-1\n\nReverted by hand after the outage.\n";
    assert!(changes_in(message).is_empty());
    let message = "Pin petclinic\n\nAs the last commit said:\nBuilder-Monitor-Change: c-1\n";
    assert!(changes_in(message).is_empty());
    // The subject is never a trailer.
    assert!(changes_in("Builder-Monitor-Change: c-1\n").is_empty());
    let message = "Squash\n\nbody\n\nbuilder-monitor-change: c-1\nBuilder-Monitor-Change:  c-2 \n\n\n";
    assert_eq!(changes_in(message), ["c-1", "c-2"]);
}

proptest! {
    /// Whatever surrounds it (printable ASCII lines without a marker, either line ending, with or
    /// without a final newline), a marker edit changes the marked line and nothing else.
    #[test]
    fn marker_changes_only_the_marked_line(
        before in proptest::collection::vec(("[ -~]{0,40}", any::<bool>()), 0..12),
        after in proptest::collection::vec(("[ -~]{0,40}", any::<bool>()), 0..12),
        indent in "[ ]{0,6}",
        crlf in any::<bool>(),
        final_newline in any::<bool>(),
    ) {
        prop_assume!(before.iter().chain(&after).all(|(l, _)| !l.contains("builder-monitor")));
        let eol = |crlf: bool| if crlf { "\r\n" } else { "\n" };
        let marked = |reference: &str| format!("{indent}image: {reference}  # {{\"builder-monitor\": \"petclinic\"}}");
        let file = |middle: String| {
            let mut lines: Vec<(String, &str)> = before.iter().map(|(l, c)| (l.clone(), eol(*c))).collect();
            lines.push((middle, eol(crlf)));
            lines.extend(after.iter().map(|(l, c)| (l.clone(), eol(*c))));
            let count = lines.len();
            lines.into_iter().enumerate().map(|(i, (l, e))| {
                if i + 1 == count && !final_newline { l } else { format!("{l}{e}") }
            }).collect::<String>()
        };
        let text = file(marked(&r(":1.2", '1')));
        let edit = marker(&text, "petclinic", &r("", '2')).unwrap();
        prop_assert_eq!(edit.text, file(marked(&r("", '2'))));
        prop_assert_eq!(edit.previous, Some(r(":1.2", '1')));
    }
}

#[test]
fn commit_message_lists_the_fixes_and_ends_with_their_trailer() {
    use crate::vulns::{Fix, Priority};
    let fix = |id: &str, cves: &[&str], priority| Fix {
        id: id.into(),
        cves: cves.iter().map(|c| c.to_string()).collect(),
        priority,
        ..Fix::default()
    };
    let fixes = [
        fix("USN-7000-1", &["CVE-2026-1111", "CVE-2026-1112"], Some(Priority::High)),
        fix("USN-7001-1\nBuilder-Monitor-Change: forged", &[], None),
    ];
    let message = commit_message("Rebase", &[("app".into(), "r/app@sha256:1".into())], "c-9", &[], &fixes);
    assert_eq!(
        message,
        "Rebase\n\napp: r/app@sha256:1\n\nFixes:\n- USN-7000-1 (high): CVE-2026-1111, CVE-2026-1112\n- USN-7001-1\\nBuilder-Monitor-Change: forged\n\nBuilder-Monitor-Change: c-9\nBuilder-Monitor-Fixes: USN-7000-1, USN-7001-1\\nBuilder-Monitor-Change: forged\n"
    );
    assert_eq!(changes_in(&message), ["c-9"]);
}
