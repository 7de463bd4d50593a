//! Git write-back end to end, through the built binary against the real registry and real Git: a
//! run image push rebases two apps in the registry and ends as one commit of their new digests
//! (a kustomization, a Helm values file, a marked ClusterBuilder manifest) with the change's
//! trailers; a person's push between fetch and push is built on, never overwritten, and so is one
//! that takes the branch inside receive-pack (a race, not a refusal), a same-line edit in either
//! kept; a crash right after the push makes no second commit, even when a person reverted the
//! commit before the restart (that revert is kept, the images held); a person's older digest is
//! kept and the image held; a wrong token fails clearly without showing it; a builder move
//! rewrites the builder's marker.

use crate::support;

mod batch;

use std::path::{Path, PathBuf};

use serde_json::Value;

use builder_monitor::ledger::{ActionState, Ledger};
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use builder_monitor_core::reference::ImageRef;
use support::app::{self, App, RunImage};
use support::cnb::BuilderSpec;
use support::daemon::{Output, Workspace, run_with_env};
use support::git::{HttpGit, Remote, git};
use support::images::{Format, Pusher};
use support::registry::TestRegistry;

mod fixes;

const APPS: [&str; 2] = ["web", "api"];

struct World {
    _registry: TestRegistry,
    pusher: Pusher,
    ws: Workspace,
    host: String,
    remote: Remote,
    run: u32,
    /// `main` after the first run (which commits the builder's first pin into its marker).
    start: String,
}

/// The GitOps repository's files, naming the apps and the builder in `host`.
fn manifests(host: &str) -> Vec<(String, String)> {
    vec![
        (
            "apps/web/kustomization.yaml".into(),
            format!(
                "# web, as Argo CD deploys it\nresources:\n- deployment.yaml\nimages:\n- name: {host}/apps/web\n  newTag: latest # moved by builder-monitor\n- name: docker.io/library/nginx\n  newTag: \"1.27\"\n"
            ),
        ),
        (
            "apps/api/values.yaml".into(),
            format!(
                "replicaCount: 2\nimage:\n  repository: {host}/apps/api\n  digest: \"\" # set by builder-monitor\n"
            ),
        ),
        (
            "platform/builder.yaml".into(),
            format!(
                "apiVersion: kpack.io/v1alpha2\nkind: ClusterBuilder\nmetadata:\n  name: jammy\nspec:\n  image: {host}/demo/builder:latest@sha256:{} # {{\"builder-monitor\": \"builder:jammy\"}}\n",
                "0".repeat(64)
            ),
        ),
        (
            "apps/web/report-cronjob.yaml".into(),
            format!(
                "apiVersion: batch/v1\nkind: CronJob\nspec:\n  jobTemplate:\n    spec:\n      template:\n        spec:\n          containers:\n          - name: report\n            image: {host}/apps/web:latest@sha256:{} # {{\"builder-monitor\": \"web\"}}\n",
                "0".repeat(64)
            ),
        ),
        ("README.md".into(), "The fleet's manifests.\n".into()),
    ]
}

impl World {
    /// Run image v1, a builder, two apps built on it, a GitOps repository naming them; one
    /// `run --once` pins everything. `gitops` is the `[[gitops]]` table's extra lines.
    async fn new(policy: &str, env: &[(&str, &str)], gitops: impl FnOnce(&Remote) -> String) -> Self {
        let registry = TestRegistry::start();
        let pusher = Pusher::new(&registry.host);
        let host = registry.host.clone();
        let run_tag = format!("{host}/demo/run:latest");
        let run_v1 = RunImage::jammy("1", 3);
        let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
        pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
        let mut images = String::new();
        for name in APPS {
            let app = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest)).label("app", name);
            app::push_app(&pusher, &format!("apps/{name}"), Some("latest"), &app, Format::Oci).await;
            images += &format!(
                "[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/{name}:latest\"\npolicy = \"{policy}\"\n\n"
            );
        }
        let files = manifests(&host);
        let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
        let remote = Remote::new(&files);
        let ws = Workspace::new();
        ws.config(&format!(
            "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
             [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n{images}\
             [runner]\ntype = \"none\"\nrebase = \"registry\"\nmax_attempts = 1\n\n\
             [[gitops]]\nname = \"fleet\"\n{}\n\
             author = {{ name = \"builder-monitor\", email = \"bm@example.com\" }}\n\
             files = [\n  {{ path = \"apps/web/kustomization.yaml\", format = \"kustomize\", image = \"web\" }},\n  \
             {{ path = \"apps/api/values.yaml\", format = \"helm-values\", image = \"api\", key = \"image.digest\" }},\n  \
             {{ path = \"platform/builder.yaml\", format = \"marker\" }},\n  \
             {{ path = \"apps/web/report-cronjob.yaml\", format = \"marker\" }},\n]\n",
            gitops(&remote)
        ));
        let mut world = World { _registry: registry, pusher, ws, host, remote, run: 1, start: String::new() };
        let first = world.once(env);
        assert_eq!(first.code, Some(0), "{}", first.stderr);
        world.start = world.remote.head("main");
        world
    }

    fn config(&self) -> PathBuf {
        self.ws.path("config.toml")
    }

    /// `run --once` with `env` (a PATH with a wrapped git, a token).
    fn once(&self, env: &[(&str, &str)]) -> Output {
        run_with_env(&["run", "--once", "--config", self.config().to_str().unwrap()], env, self.ws.dir.path())
    }

    async fn move_run_image(&mut self) {
        self.run += 1;
        let next = RunImage::jammy(&self.run.to_string(), self.run as usize + 2);
        app::push_run(&self.pusher, "demo/run", Some("latest"), &next, Format::Oci).await;
    }

    async fn tag(&self, app: &str) -> String {
        builder_monitor::install_crypto_provider();
        let registry = Registry::new([], Metrics::new());
        let tag = ImageRef::parse(&format!("{}/apps/{app}:latest", self.host)).unwrap();
        registry.head_manifest(&tag).await.unwrap().digest
    }

    fn ledger(&self) -> Ledger {
        Ledger::open_read_only(&self.ws.path("state.db")).unwrap()
    }

    async fn events(&self, event_type: &str) -> Vec<Value> {
        let events = self.ledger().events_after(0, 1000).await.unwrap();
        events
            .into_iter()
            .map(|e| serde_json::to_value(&e.event).unwrap())
            .filter(|e| e["type"] == event_type)
            .collect()
    }

    async fn gitops_actions(&self) -> Vec<builder_monitor::ledger::ActionRecord> {
        let mut actions: Vec<_> =
            self.ledger().actions(100).await.unwrap().into_iter().filter(|a| a.action == "gitops").collect();
        // The changes' actions, not the first pin's, in the order their changes were recorded
        // (the watch's sequence): two checks within one second record the same `created`.
        actions.retain(|a| !a.change.starts_with("pin-"));
        let changes = self.ledger().changes(None, 100).await.unwrap();
        let order = |a: &builder_monitor::ledger::ActionRecord| {
            changes.iter().find(|c| c.id == a.change).map(|c| (c.detected, c.seq))
        };
        actions.sort_by_key(|a| (order(a), a.created));
        actions
    }

    /// The commits builder-monitor made on `main` (with its trailer) since the first run, newest
    /// first.
    fn commits(&self) -> Vec<(String, String)> {
        self.remote
            .log(&format!("{}..main", self.start))
            .into_iter()
            .filter(|(_, m)| m.contains("Builder-Monitor-Change:"))
            .collect()
    }
}

/// A `git` first on PATH that runs `before_push` (a shell snippet) before the first push, or
/// `after_push` after it, then behaves as git.
fn wrapped_git(dir: &Path, before_push: &str, after_push: &str) -> String {
    let real =
        String::from_utf8(std::process::Command::new("sh").args(["-c", "command -v git"]).output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let marker = dir.join("pushed-once");
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = push ] && [ ! -e '{m}' ]; then\n  touch '{m}'\n  {before_push}\n  '{real}' \"$@\"; status=$?\n  {after_push}\n  exit $status\nfi\nexec '{real}' \"$@\"\n",
        m = marker.display()
    );
    let path = bin.join("git");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_image_push_is_one_commit_of_every_new_digest_and_a_persons_rollback_is_kept() {
    let mut w = World::new("auto", &[], |r| format!("repo = \"{}\"", r.url())).await;
    // The first run committed the builder's first pin into its marker.
    let builder_pin = w.ledger().watch("jammy").await.unwrap().unwrap().pin.unwrap().digest;
    let pinned = w.remote.log("main");
    assert!(pinned[0].1.starts_with("jammy: pinned to sha256:"), "{pinned:#?}");
    assert!(pinned[0].1.contains("Builder-Monitor-Change: pin-"), "{pinned:#?}");
    assert_eq!(w.remote.changed_files(&pinned[0].0), ["platform/builder.yaml"], "no app moved yet");
    assert!(
        w.remote.file("main", "platform/builder.yaml").contains(&format!("demo/builder:latest@{builder_pin} # {{"))
    );
    let before = w.remote.head("main");
    w.move_run_image().await;
    let out = w.once(&[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let (web, api) = (w.tag("web").await, w.tag("api").await);

    // One commit, on top of what was there, with all three files and the change's trailers.
    let commits = w.commits();
    assert_eq!(commits.len(), 1, "{commits:#?}\n{:#?}", w.remote.log("main"));
    let (id, message) = &commits[0];
    assert_eq!(git(&w.remote.bare, &["rev-parse", &format!("{id}^")]).trim(), before);
    let change = w.ledger().changes(None, 10).await.unwrap()[0].id.clone();
    assert!(message.contains(&format!("Builder-Monitor-Change: {change}")), "{message}");
    assert!(message.contains("Builder-Monitor-Reasons: "), "{message}");
    assert!(message.contains(&format!("web: {}/apps/web:latest@{web}", w.host)), "{message}");
    assert!(message.contains(&format!("api: {}/apps/api:latest@{api}", w.host)), "{message}");
    let mut files = w.remote.changed_files(id);
    files.sort();
    assert_eq!(files, ["apps/api/values.yaml", "apps/web/kustomization.yaml", "apps/web/report-cronjob.yaml"]);
    let kustomization = w.remote.file("main", "apps/web/kustomization.yaml");
    assert_eq!(
        kustomization,
        format!(
            "# web, as Argo CD deploys it\nresources:\n- deployment.yaml\nimages:\n- name: {}/apps/web\n  digest: {web}\n- name: docker.io/library/nginx\n  newTag: \"1.27\"\n",
            w.host
        ),
        "the digest in, newTag out, every other byte as it was"
    );
    assert!(
        w.remote
            .file("main", "apps/api/values.yaml")
            .contains(&format!("  digest: \"{api}\" # set by builder-monitor\n"))
    );
    let builder_pin = w.ledger().watch("jammy").await.unwrap().unwrap().pin.unwrap().digest;
    assert!(
        w.remote.file("main", "platform/builder.yaml").contains(&format!("demo/builder:latest@{builder_pin} # {{"))
    );
    let committed = w.events("gitops.committed").await;
    assert_eq!(committed.len(), 2, "the first pin's and the change's");
    assert_eq!(committed[1]["action"]["commit"]["id"], id.as_str());
    assert_eq!(committed[1]["action"]["commit"]["branch"], "main");

    // `status` and `plan` show the target's last commit.
    let status = w.ws.run(&["status", "--json", "--config", w.config().to_str().unwrap()]);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(status["gitops"][0]["commit"], id.as_str(), "{:#}", status["gitops"]);
    assert_eq!(
        (status["gitops"][0]["change"].as_str(), status["gitops"][0]["state"].as_str()),
        (Some(change.as_str()), Some("succeeded"))
    );
    let plan = w.ws.run(&["plan", "--config", w.config().to_str().unwrap()]);
    assert!(
        plan.stdout.contains(&format!(
            "gitops fleet ({} main): then commit the new digests; last commit {} (change {change})",
            w.remote.url(),
            &id[..12]
        )),
        "{}",
        plan.stdout
    );

    // Nothing moved: nothing to commit.
    assert_eq!(w.once(&[]).code, Some(0));
    assert_eq!(w.commits().len(), 1);

    // A person puts web back to its digest before and pushes: the next change keeps that, holds
    // web, and still writes api.
    let old = format!("{}/apps/web", w.host);
    let rolled_back =
        kustomization.replace(&web, "sha256:1111111111111111111111111111111111111111111111111111111111111111");
    assert!(rolled_back.contains(&old));
    w.remote.push_change("main", "web back to the last good build", &[("apps/web/kustomization.yaml", &rolled_back)]);
    w.move_run_image().await;
    assert_eq!(w.once(&[]).code, Some(0));
    let api = w.tag("api").await;
    assert_eq!(w.commits().len(), 2);
    assert_eq!(w.remote.file("main", "apps/web/kustomization.yaml"), rolled_back, "the person's digest stays");
    assert!(
        w.remote.file("main", "apps/web/report-cronjob.yaml").contains(&format!("@{web} # ")),
        "held: web is written nowhere, its marker keeps the last commit's digest"
    );
    assert!(w.remote.file("main", "apps/api/values.yaml").contains(&api));
    let overridden = w.events("gitops.overridden").await;
    assert_eq!(overridden.len(), 1, "{overridden:#?}");
    assert_eq!(overridden[0]["action"]["image"], "web");
    let status = w.ws.run(&["status", "--json", "--config", w.config().to_str().unwrap()]);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    let web_status = status["images"].as_array().unwrap().iter().find(|i| i["name"] == "web").unwrap().clone();
    assert_eq!(web_status["last_action"]["holds"], true, "{web_status:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_someone_beat_is_built_on_top_never_forced() {
    let mut w = World::new("auto", &[], |r| format!("repo = \"{}\"", r.url())).await;
    w.move_run_image().await;
    // Between our fetch and our push, a person pushes a commit of their own.
    let work = w.remote.work.display().to_string();
    let person = format!(
        "(cd '{work}' && export GIT_AUTHOR_NAME=Pat GIT_AUTHOR_EMAIL=pat@example.com GIT_COMMITTER_NAME=Pat GIT_COMMITTER_EMAIL=pat@example.com GIT_CONFIG_GLOBAL=/dev/null && git pull --quiet --rebase=false origin main && echo more >> README.md && git commit --quiet -am 'docs by a person' && git push --quiet origin HEAD:main)"
    );
    let path = wrapped_git(w.ws.dir.path(), &person, "");
    let out = w.once(&[("PATH", &path)]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("push rejected: someone pushed first; fetching again"), "{}", out.stderr);
    let log = w.remote.log("main");
    assert!(log[0].1.contains("Builder-Monitor-Change:"), "ours on top: {log:#?}");
    assert_eq!(log[1].1, "docs by a person", "theirs kept, under ours: {log:#?}");
    assert!(w.remote.file("main", "README.md").ends_with("more\n"));
    assert_eq!(w.gitops_actions().await.last().unwrap().state, ActionState::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_right_after_the_push_makes_no_second_commit() {
    let mut w = World::new("auto", &[], |r| format!("repo = \"{}\"", r.url())).await;
    w.move_run_image().await;
    // The push lands, then the daemon dies before it records it.
    let path = wrapped_git(w.ws.dir.path(), "", "kill -9 $PPID");
    let out = w.once(&[("PATH", &path)]);
    assert_ne!(out.code, Some(0), "killed: {}", out.stderr);
    assert_eq!(w.commits().len(), 1);
    let actions = w.gitops_actions().await;
    assert_eq!(actions.last().unwrap().state, ActionState::Running, "{actions:#?}");

    let out = w.once(&[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(w.commits().len(), 1, "the trailer said the change was there");
    let action = w.gitops_actions().await.last().unwrap().clone();
    assert_eq!(action.state, ActionState::Succeeded);
    assert!(action.detail.as_deref().unwrap_or_default().contains("holds this change already"), "{action:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_token_is_basic_auth_and_a_wrong_one_fails_without_showing_it() {
    let served = tempfile::tempdir().unwrap();
    let server = HttpGit::start(served.path(), "right-token-4711").await;
    let mut w = World::new("auto", &[("BM_GIT_TOKEN", "right-token-4711")], |r| {
        // Served from a copy beside the server's root: the same repository over HTTP.
        std::os::unix::fs::symlink(&r.bare, served.path().join("fleet.git")).unwrap();
        format!("repo = \"{}/fleet.git\"\ncredentials_env = \"BM_GIT_TOKEN\"\nusername = \"bot\"", server.base)
    })
    .await;
    w.move_run_image().await;
    let out = w.once(&[("BM_GIT_TOKEN", "wrong-token-0815")]);
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    let action = w.gitops_actions().await.last().unwrap().clone();
    assert_eq!(action.state, ActionState::Failed);
    let detail = action.detail.clone().unwrap_or_default();
    assert_eq!(
        detail,
        format!(
            "git fetch: {}/fleet.git refused the credentials (check the token in $BM_GIT_TOKEN and the username \"bot\")",
            server.base
        )
    );
    let failed = w.events("gitops.failed").await;
    assert_eq!(failed.len(), 1);
    use base64::Engine as _;
    let basic = base64::engine::general_purpose::STANDARD.encode("bot:wrong-token-0815");
    for text in [out.stderr.as_str(), detail.as_str(), &failed[0].to_string()] {
        assert!(!text.contains("wrong-token-0815") && !text.contains(&basic), "the token leaked: {text}");
    }
    assert!(w.commits().is_empty());

    // The right token: committed over HTTP.
    w.move_run_image().await;
    let out = w.once(&[("BM_GIT_TOKEN", "right-token-4711")]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(w.commits().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_builder_move_rewrites_the_builders_marker() {
    let w = World::new("notify", &[], |r| format!("repo = \"{}\"\npush_branch = \"builder-monitor/updates\"", r.url()))
        .await;
    let run_tag = format!("{}/demo/run:latest", w.host);
    let bumped = BuilderSpec::jammy(&run_tag).bump("paketo-buildpacks/java", "18.2.0");
    let pushed = w.pusher.push_image("demo/builder", Some("latest"), &bumped.image(), Format::Oci).await;
    let out = w.once(&[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    // For review: on its own branch, main untouched.
    assert!(w.commits().is_empty());
    let log = w.remote.log("builder-monitor/updates");
    assert!(log[0].1.contains("Builder-Monitor-Change:"), "{log:#?}");
    assert!(log[1].1.starts_with("jammy: pinned to sha256:"), "the first pin's commit under it: {log:#?}");
    let manifest = w.remote.file("builder-monitor/updates", "platform/builder.yaml");
    assert!(
        manifest.contains(&format!(
            "  image: {}/demo/builder:latest@{} # {{\"builder-monitor\": \"builder:jammy\"}}\n",
            w.host, pushed.digest
        )),
        "{manifest}"
    );
    assert_eq!(w.remote.changed_files(&log[0].0), ["platform/builder.yaml"], "notify: no app moved");
}

/// The web marker line of the report CronJob as `w`'s repository has it now, with its digest
/// set to a person's `sha256:1…1`; the whole file and that reference.
fn persons_web_marker(w: &World) -> (String, String) {
    let cronjob = w.remote.file("main", "apps/web/report-cronjob.yaml");
    let zeros = format!("{}/apps/web:latest@sha256:{}", w.host, "0".repeat(64));
    let theirs = format!("{}/apps/web:latest@sha256:{}", w.host, "1".repeat(64));
    assert!(cronjob.contains(&zeros), "web's marker is not written before the change: {cronjob}");
    (cronjob.replace(&zeros, &theirs), theirs)
}

/// After a person's same-line edit of web's marker raced our push: theirs kept, ours built on it
/// with api's digest, web held with `gitops.overridden`, and the action succeeded.
async fn theirs_kept_ours_on_top(w: &World, cronjob: &str, out: &Output) {
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("push rejected: someone pushed first; fetching again"), "{}", out.stderr);
    let log = w.remote.log("main");
    assert!(log[0].1.contains("Builder-Monitor-Change:"), "ours on top: {log:#?}");
    assert_eq!(log[1].1, "web pinned by hand", "theirs kept, under ours: {log:#?}");
    assert_eq!(w.remote.file("main", "apps/web/report-cronjob.yaml"), cronjob, "their digest stays");
    assert!(w.remote.file("main", "apps/web/kustomization.yaml").contains("newTag: latest"), "web is held everywhere");
    assert!(w.remote.file("main", "apps/api/values.yaml").contains(&w.tag("api").await), "api is written");
    let overridden = w.events("gitops.overridden").await;
    assert_eq!(overridden.len(), 1, "{overridden:#?}");
    assert_eq!(overridden[0]["action"]["image"], "web");
    let action = w.gitops_actions().await.last().unwrap().clone();
    assert_eq!((action.state, action.attempts), (ActionState::Succeeded, 1), "{action:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persons_same_line_edit_pushed_first_is_kept_with_no_commit_before_ours() {
    let mut w = World::new("auto", &[], |r| format!("repo = \"{}\"", r.url())).await;
    w.move_run_image().await;
    // No commit of ours wrote web's marker yet: the file as the attempt first fetched it is the
    // baseline that tells their edit from ours.
    let (cronjob, _) = persons_web_marker(&w);
    let prepared = w.ws.path("persons-cronjob.yaml");
    std::fs::write(&prepared, &cronjob).unwrap();
    let work = w.remote.work.display().to_string();
    let person = format!(
        "(cd '{work}' && export GIT_AUTHOR_NAME=Pat GIT_AUTHOR_EMAIL=pat@example.com GIT_COMMITTER_NAME=Pat GIT_COMMITTER_EMAIL=pat@example.com GIT_CONFIG_GLOBAL=/dev/null && git pull --quiet --rebase=false origin main && cp '{}' apps/web/report-cronjob.yaml && git commit --quiet -am 'web pinned by hand' && git push --quiet origin HEAD:main)",
        prepared.display()
    );
    let path = wrapped_git(w.ws.dir.path(), &person, "");
    let out = w.once(&[("PATH", &path)]);
    theirs_kept_ours_on_top(&w, &cronjob, &out).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_push_whose_branch_a_concurrent_push_took_is_fetched_again_not_failed() {
    let mut w = World::new("auto", &[], |r| format!("repo = \"{}\"", r.url())).await;
    w.move_run_image().await;
    let (cronjob, _) = persons_web_marker(&w);
    let work = &w.remote.work;
    git(work, &["fetch", "--quiet", "origin"]);
    git(work, &["checkout", "--quiet", "-B", "person", "origin/main"]);
    std::fs::write(work.join("apps/web/report-cronjob.yaml"), &cronjob).unwrap();
    git(work, &["commit", "--quiet", "-am", "web pinned by hand"]);
    git(work, &["push", "--quiet", "origin", "person"]);
    // Their push lands while ours is in receive-pack, after main was advertised to us: main is
    // not where our push expects it any more ("cannot lock ref … expected").
    let hook = w.remote.bare.join("hooks/pre-receive");
    std::fs::write(
        &hook,
        "#!/bin/sh\nif [ ! -e raced ]; then touch raced; env -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES git update-ref refs/heads/main refs/heads/person; fi\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = w.once(&[]);
    theirs_kept_ours_on_top(&w, &cronjob, &out).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revert_of_our_pushed_commit_before_the_restart_is_kept_and_holds_the_images() {
    let mut w = World::new("auto", &[], |r| format!("repo = \"{}\"", r.url())).await;
    w.move_run_image().await;
    // The push lands, the daemon dies before it records it, and a person reverts the commit.
    let path = wrapped_git(w.ws.dir.path(), "", "kill -9 $PPID");
    let out = w.once(&[("PATH", &path)]);
    assert_ne!(out.code, Some(0), "killed: {}", out.stderr);
    let (ours, _) = w.commits()[0].clone();
    let work = &w.remote.work;
    git(work, &["fetch", "--quiet", "origin"]);
    git(work, &["checkout", "--quiet", "-B", "main", "origin/main"]);
    git(work, &["revert", "--no-edit", "HEAD"]);
    git(work, &["push", "--quiet", "origin", "main"]);

    let out = w.once(&[]);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert_eq!(w.commits().len(), 1, "not committed again over the revert: {:#?}", w.remote.log("main"));
    for file in ["apps/web/kustomization.yaml", "apps/api/values.yaml", "apps/web/report-cronjob.yaml"] {
        assert_eq!(w.remote.file("main", file), w.remote.file(&format!("{ours}^"), file), "{file} as reverted");
    }
    let action = w.gitops_actions().await.last().unwrap().clone();
    assert_eq!(action.state, ActionState::Succeeded, "{action:?}");
    let detail = action.detail.unwrap_or_default();
    assert!(detail.contains(&format!("holds this change already: commit {ours}")), "{detail}");
    assert!(detail.contains("a later commit undid it for web, api"), "{detail}");
    let mut held: Vec<String> = w
        .events("gitops.overridden")
        .await
        .iter()
        .map(|e| e["action"]["image"].as_str().unwrap_or_default().to_string())
        .collect();
    held.sort();
    assert_eq!(held, ["api", "web"], "{}", out.stderr);
    let status = w.ws.run(&["status", "--json", "--config", w.config().to_str().unwrap()]);
    let status: Value = serde_json::from_str(&status.stdout).unwrap();
    for image in status["images"].as_array().unwrap() {
        assert_eq!(image["last_action"]["holds"], true, "{image:#}");
    }

    // And a restart after that commits nothing either.
    assert_eq!(w.once(&[]).code, Some(0));
    assert_eq!(w.commits().len(), 1);
}
