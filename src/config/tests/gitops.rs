//! `[[gitops]]`: remotes, branches, author, credentials and the files to edit.

use super::*;

const BASE: &str = "[[builders]]\nname = \"jammy\"\nimage = \"paketobuildpacks/builder-jammy-base\"\n\
[[images]]\nname = \"web\"\nbuilder = \"jammy\"\nimage = \"r.example/shop/web\"\n";

fn assert_errors(errors: &[String], expect: &[&str]) {
    for (got, want) in errors.iter().zip(expect) {
        assert!(got.contains(want), "got {got:?}, want {want:?}\nall: {errors:#?}");
    }
    assert_eq!(errors.len(), expect.len(), "{errors:#?}");
}

#[test]
fn a_target_with_every_format_and_its_defaults() {
    let c = parse(&format!(
        r#"{BASE}
[[gitops]]
name = "fleet"
repo = "https://git.example.com/shop/fleet.git"
push_branch = "builder-monitor/updates"
files = [
  {{ path = "apps/web/kustomization.yaml", format = "kustomize", image = "web" }},
  {{ path = "charts/web/values.yaml", format = "helm-values", image = "web", key = "image.digest" }},
  {{ path = "platform/builders.yaml", format = "marker" }},
]

[[gitops]]
name = "local"
repo = "file:///srv/git/fleet.git"
author = {{ name = "Release Bot", email = "bot@example.com" }}
files = [{{ path = "web.yaml", format = "marker" }}]
"#
    ))
    .unwrap();
    let fleet = &c.gitops[0];
    assert_eq!((fleet.branch.as_str(), fleet.push_branch.as_str()), ("main", "builder-monitor/updates"));
    assert_eq!(fleet.author, Author { name: "builder-monitor".into(), email: "builder-monitor@localhost".into() });
    assert_eq!(fleet.auth, GitAuth::None);
    assert_eq!(fleet.files[0].format, FileFormat::Kustomize { image: "web".into() });
    assert_eq!(fleet.files[1].format, FileFormat::HelmValues { image: "web".into(), key: "image.digest".into() });
    assert_eq!((fleet.files[2].format.clone(), fleet.files[2].image()), (FileFormat::Marker, None));
    assert_eq!(c.gitops[1].push_branch, "main", "push_branch defaults to branch");
    assert_eq!(c.gitops[1].author.name, "Release Bot");
    assert_eq!(gitops_subject("fleet"), "gitops:fleet");
}

#[test]
fn a_token_comes_from_the_environment_for_https_only() {
    // A variable every test process has (setting one would need unsafe code).
    let home = std::env::var("HOME").unwrap();
    let text = |repo: &str, extra: &str| {
        format!(
            "{BASE}[[gitops]]\nname = \"g\"\nrepo = \"{repo}\"\ncredentials_env = \"HOME\"\n{extra}files = [{{ path = \"a.yaml\", format = \"marker\" }}]\n"
        )
    };
    let c = parse(&text("https://git.example.com/a.git", "")).unwrap();
    match &c.gitops[0].auth {
        GitAuth::Token { username, token, env } => {
            assert_eq!((username.as_str(), token.expose(), env.as_str()), ("x-access-token", home.as_str(), "HOME"));
        }
        other => panic!("{other:?}"),
    }
    // Plain http only to this machine.
    assert!(parse(&text("http://127.0.0.1:8080/a.git", "username = \"bot\"\n")).is_ok());
    assert_errors(
        &parse(&text("http://git.example.com/a.git", "")).unwrap_err(),
        &[
            "repo over plain http would send the token in the clear",
            "credentials_env is an https token: the repo must be https://",
        ],
    );
    assert_errors(
        &parse(&text("https://git.example.com/a.git", "ssh_key_file = \"id\"\n")).unwrap_err(),
        &["set either credentials_env (https) or ssh_key_file (ssh), not both"],
    );
    let unset = format!(
        "{BASE}[[gitops]]\nname = \"g\"\nrepo = \"https://h/a.git\"\ncredentials_env = \"BM_TEST_GIT_TOKEN_UNSET\"\nfiles = [{{ path = \"a\", format = \"marker\" }}]\n"
    );
    assert_errors(
        &parse(&unset).unwrap_err(),
        &["environment variable BM_TEST_GIT_TOKEN_UNSET is not set (credentials)"],
    );
}

#[test]
fn bad_entries_are_errors_at_their_line() {
    let errors = parse(&format!(
        r#"{BASE}
[[gitops]]
name = "Fleet"
repo = "https://bot:secret@git.example.com/fleet.git"
branch = "a..b"
author = {{ name = "", email = "nobody" }}
username = "bot"
files = [
  {{ path = "../etc/passwd", format = "kustomize", image = "web" }},
  {{ path = "a.yaml", format = "kustomize" }},
  {{ path = "b.yaml", format = "kustomize", image = "nope" }},
  {{ path = "c.yaml", format = "helm-values", image = "web" }},
  {{ path = "d.yaml", format = "helm-values", image = "web", key = "image..digest" }},
  {{ path = "e.yaml", format = "marker", image = "web" }},
  {{ path = "f.yaml", format = "json-patch" }},
  {{ path = "g.yaml", format = "marker", key = "x" }},
]

[[gitops]]
name = "empty"
repo = "git@github.com:shop/fleet.git"
files = []
"#
    ))
    .unwrap_err();
    assert_errors(
        &errors,
        &[
            "10:8: gitops name \"Fleet\" is not a DNS label",
            "11:8: repo must not carry credentials",
            "12:10: branch \"a..b\" is not a valid Git branch name",
            "13:10: author needs a name and an email",
            "14:12: username goes with credentials_env",
            "16:12: path \"../etc/passwd\" must be relative to the repository",
            "17:31: format \"kustomize\" needs `image`",
            "18:52: unknown image \"nope\" (configured: web)",
            "19:31: format \"helm-values\" needs `key`",
            "20:67: key \"image..digest\" is not a dotted path",
            "21:49: a marker file names its images on its lines",
            "22:31: unknown format \"json-patch\", expected kustomize, helm-values or marker",
            "23:47: `key` is for format \"helm-values\"",
            "28:8: repo \"git@github.com:shop/fleet.git\" is not a file://, https:// or ssh:// URL",
            "29:9: files must name at least one file to edit",
        ],
    );
}

#[test]
fn batch_is_a_window_of_one_minute_to_a_day() {
    let target = |batch: &str| {
        format!(
            "{BASE}\n[[gitops]]\nname = \"fleet\"\nrepo = \"file:///srv/fleet.git\"\nbatch = \"{batch}\"\nfiles = [{{ path = \"a.yaml\", format = \"marker\" }}]\n"
        )
    };
    let c = parse(&target("1h")).unwrap();
    assert_eq!(c.gitops[0].batch, Some(std::time::Duration::from_secs(3600)));
    let c = parse(&target("1h").replace("batch = \"1h\"\n", "")).unwrap();
    assert_eq!(c.gitops[0].batch, None, "off by default");
    for (batch, want) in [
        ("30s", "12:9: batch 30s must be between 1m and 24h"),
        ("25h", "12:9: batch 25h must be between 1m and 24h"),
        ("soon", "12:9: invalid batch \"soon\""),
        ("60", "12:9: invalid batch \"60\" (a unit is required"),
    ] {
        assert_errors(&parse(&target(batch)).unwrap_err(), &[want]);
    }
}
