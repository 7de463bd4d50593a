//! `check --online`, through the real binary against a real registry, the Kubernetes API double, a
//! real Git remote, a closed port and a listener that never answers: what is there passes, each
//! thing `run` would fail on is one line naming its entry and its fix, exit 1.

use crate::support;

use support::app::{self, RunImage};
use support::cnb::BuilderSpec;
use support::daemon::Workspace;
use support::git::Remote;
use support::images::{Format, Pusher};
use support::kube::KubeDouble;
use support::receiver::ClosedPort;
use support::registry::TestRegistry;

/// A loopback listener that takes connections and never says a word, while it lives.
struct Hung {
    host: String,
    task: tokio::task::JoinHandle<()>,
}

impl Hung {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        Hung { host, task }
    }
}

impl Drop for Hung {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn lines_with<'a>(text: &'a str, needle: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.contains(needle)).collect()
}

// The binary runs while the in-process kube double answers it: two threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_online_passes_what_is_there_and_names_each_entry_run_would_fail_on() {
    let registry = TestRegistry::start();
    let host = registry.host.clone();
    let pusher = Pusher::new(&host);
    let run_tag = format!("{host}/demo/run:latest");
    app::push_run(&pusher, "demo/run", Some("latest"), &RunImage::jammy("1", 2), Format::Oci).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
    let kube = KubeDouble::start().await;
    // The daemon's namespace (`[kubernetes] namespace`, default `default`), which the check reads.
    kube.create_namespace("default");
    let remote = Remote::new(&[("apps/web.yaml", "image: x\n")]);
    let closed = ClosedPort::new();
    let dead = format!("127.0.0.1:{}", closed.port());
    let ws = Workspace::new();
    let kubeconfig = kube.kubeconfig(ws.dir.path());
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\n\n\
         [registries.\"{dead}\"]\nmax_attempts = 1\n\n\
         [kubernetes]\nkubeconfig = \"{kubeconfig}\"\nleader_election = true\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n\
         [[builders]]\nname = \"typo\"\nimage = \"{host}/demo/builder:lastest\"\nwatch_run_image = false\n\n\
         [[builders]]\nname = \"gone\"\nimage = \"{dead}/demo/builder:latest\"\nwatch_run_image = false\n\n\
         [[images]]\nname = \"web\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/web:latest\"\n\n\
         [[gitops]]\nname = \"fleet\"\nrepo = \"{good}\"\nbranch = \"main\"\n\
         author = {{ name = \"bm\", email = \"bm@example.com\" }}\n\
         files = [{{ path = \"apps/web.yaml\", format = \"marker\" }}]\n\n\
         [[gitops]]\nname = \"missing\"\nrepo = \"file://{missing}\"\nbranch = \"main\"\n\
         author = {{ name = \"bm\", email = \"bm@example.com\" }}\n\
         files = [{{ path = \"apps/web.yaml\", format = \"marker\" }}]\n",
        kubeconfig = kubeconfig.display(),
        good = remote.url(),
        missing = ws.path("no-such-repo.git").display(),
    ));
    let config = config.to_str().unwrap();

    // Offline, all of it passes: nothing is asked.
    let offline = ws.run(&["check", "--config", config]);
    assert_eq!(offline.code, Some(0), "{}", offline.stderr);

    let out = ws.run(&["check", "--online", "--config", config]);
    assert_eq!(out.code, Some(1), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    let failed = lines_with(&out.stderr, "failed: ");
    assert_eq!(failed.len(), 3, "{}", out.stderr);
    let typo = lines_with(&out.stderr, &format!("failed: watch \"typo\": {host}/demo/builder:lastest: "));
    assert_eq!(typo.len(), 1, "{}", out.stderr);
    assert!(typo[0].ends_with("tag not found (manifest unknown) — check the tag"), "{}", typo[0]);
    let gone = lines_with(&out.stderr, &format!("failed: watch \"gone\": {dead}/demo/builder:latest: "));
    assert_eq!(gone.len(), 1, "{}", out.stderr);
    assert!(
        gone[0].contains("unavailable") && gone[0].contains(&format!("check the host and port of {dead}")),
        "{}",
        gone[0]
    );
    let missing = lines_with(&out.stderr, "failed: gitops \"missing\": file://");
    assert_eq!(missing.len(), 1, "{}", out.stderr);
    assert!(
        missing[0].contains("git ls-remote failed") && missing[0].ends_with("check repo and its credentials"),
        "{}",
        missing[0]
    );
    // An app tag not pushed yet: a note (its first build pushes it), not a failure.
    let web = lines_with(&out.stderr, &format!("note: image \"web\": {host}/apps/web:latest: no such tag yet"));
    assert_eq!(web.len(), 1, "{}", out.stderr);

    // What is there passes, the run image watch read from the builder's metadata included.
    for ok in [
        format!("ok: watch \"jammy\": {host}/demo/builder:latest: sha256:"),
        format!("ok: run image watch of \"jammy\": {run_tag}: sha256:"),
        "ok: cluster of [kubernetes]: answers".to_string(),
        format!("ok: gitops \"fleet\": {}: main there", remote.url()),
        // No app tag there to ask about: not asked.
        format!("ok: registry {host}: referrers: null"),
    ] {
        assert_eq!(lines_with(&out.stdout, &ok).len(), 1, "{ok}:\n{}", out.stdout);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_online_bounds_a_silent_registry_by_its_timeout_and_names_a_dead_cluster() {
    let hung = Hung::start().await;
    let closed = ClosedPort::new();
    let ws = Workspace::new();
    let kubeconfig = ws.path("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster:\n    server: http://127.0.0.1:{}\ncontexts:\n- name: dead\n  context:\n    cluster: dead\n    user: u\ncurrent-context: dead\nusers:\n- name: u\n  user:\n    token: t\n",
            closed.port()
        ),
    )
    .unwrap();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\n\n\
         [kubernetes]\nkubeconfig = \"{}\"\nleader_election = true\n\n\
         [[builders]]\nname = \"silent\"\nimage = \"{}/demo/builder:latest\"\nwatch_run_image = false\n",
        kubeconfig.display(),
        hung.host
    ));
    let out = ws.run(&["check", "--online", "--timeout", "1s", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(1), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    let silent = lines_with(&out.stderr, &format!("failed: watch \"silent\": {}/demo/builder:latest: ", hung.host));
    assert_eq!(silent.len(), 1, "{}", out.stderr);
    assert!(silent[0].contains("no answer within 1s"), "{}", silent[0]);
    let cluster = lines_with(&out.stderr, "failed: cluster of [kubernetes]: does not answer");
    assert_eq!(cluster.len(), 1, "{}", out.stderr);
    assert!(cluster[0].ends_with("check the kubeconfig's server address and that the cluster runs"), "{}", cluster[0]);
}

/// Two silent mistakes `check --online` names: `platforms` that keep none of the builder's (every
/// move muted forever) is a failure naming the builder's platforms; an app image given as a
/// builder's `image` (no CNB builder metadata) is a note saying it looks like one.
#[tokio::test]
async fn check_online_names_unmatched_platforms_and_an_app_image_given_as_a_builder() {
    let registry = TestRegistry::start();
    let host = registry.host.clone();
    let pusher = Pusher::new(&host);
    let run_tag = format!("{host}/demo/run:latest");
    let run = RunImage::jammy("1", 2);
    let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run, Format::Oci).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
    let web = app::App::on(&run, &run_tag, &format!("{host}/demo/run@{}", pushed.digest));
    app::push_app(&pusher, "apps/web", Some("latest"), &web, Format::Oci).await;
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\n\n\
         [[builders]]\nname = \"typo\"\nimage = \"{host}/demo/builder:latest\"\nplatforms = [\"linux/amd65\"]\n\n\
         [[builders]]\nname = \"app\"\nimage = \"{host}/apps/web:latest\"\nwatch_run_image = false\n"
    ));
    let out = ws.run(&["check", "--online", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(1), "{}\n{}", out.stdout, out.stderr);
    let typo = lines_with(&out.stderr, "watch \"typo\"");
    assert_eq!(typo.len(), 1, "{}", out.stderr);
    assert!(
        typo[0].starts_with("failed: ")
            && typo[0].contains("platforms = [linux/amd65] matches none of the builder's platforms (linux/amd64)"),
        "{}",
        typo[0]
    );
    let app = lines_with(&out.stderr, "watch \"app\"");
    assert_eq!(app.len(), 1, "{}", out.stderr);
    assert!(app[0].starts_with("note: ") && app[0].contains("this looks like an app image"), "{}", app[0]);
}

/// `check --online` asks each alert receiver's host whether it answers (a `HEAD /`: no event is
/// sent, the URL's path and query stay home) and the OSV download URL whether it is there; each
/// result is one line naming the entry and the origin only, never a token of the URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_online_probes_alert_receivers_and_the_osv_url_without_showing_their_secrets() {
    use support::receiver::{Receiver, Reply};
    let live = Receiver::start().await;
    let closed = ClosedPort::new();
    let osv = Receiver::start().await;
    osv.reply([Reply::Status(404)]);
    let ws = Workspace::new();
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\n\n\
         [vulnerabilities]\nosv = \"http://127.0.0.1:{osv}/osv.tar.gz?token=osv-secret\"\n\n\
         [[alerts]]\nname = \"live\"\ntype = \"webhook\"\nurl = \"http://127.0.0.1:{live}/services/T0/path-secret\"\nevents = [\"*\"]\n\n\
         [[alerts]]\nname = \"dead\"\ntype = \"slack\"\nurl = \"http://127.0.0.1:{closed}/hook?token=query-secret\"\nevents = [\"*\"]\n",
        osv = osv.port,
        live = live.port,
        closed = closed.port(),
    ));
    let out = ws.run(&["check", "--online", "--timeout", "10s", "--config", config.to_str().unwrap()]);
    assert_eq!(out.code, Some(1), "stdout:\n{}\nstderr:\n{}", out.stdout, out.stderr);
    let ok = format!("ok: alert \"live\" (webhook): http://127.0.0.1:{}/…: the host answers (HTTP ", live.port);
    assert_eq!(lines_with(&out.stdout, &ok).len(), 1, "{ok}:\n{}", out.stdout);
    let dead = format!("failed: alert \"dead\" (slack): http://127.0.0.1:{}/…: cannot connect", closed.port());
    let dead = lines_with(&out.stderr, &dead);
    assert_eq!(dead.len(), 1, "{}", out.stderr);
    assert!(dead[0].ends_with("check that its host and port are right and reachable"), "{}", dead[0]);
    let missing = format!(
        "failed: [vulnerabilities] osv: http://127.0.0.1:{}/…: HTTP 404 — check [vulnerabilities] osv",
        osv.port
    );
    assert_eq!(lines_with(&out.stderr, &missing).len(), 1, "{}", out.stderr);
    let shown = format!("{}{}", out.stdout, out.stderr);
    assert!(!shown.contains("secret"), "a token of a URL shown:\n{shown}");
    assert!(shown.lines().all(|l| l.chars().count() <= 160), "{shown}");
    // The receiver heard one bodiless request at its root: no event, no path of the URL.
    let heard = live.received();
    assert_eq!(heard.iter().map(|r| (r.path.as_str(), r.body.len())).collect::<Vec<_>>(), [("/", 0)]);
    let asked = osv.received();
    assert_eq!(asked.iter().map(|r| r.path.as_str()).collect::<Vec<_>>(), ["/osv.tar.gz"]);
}

/// Per app image registry, whether it serves the OCI 1.1 referrers API: Distribution 2.8 does not
/// (signing uses the referrers tag schema there), go-containerregistry's registry does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_online_shows_per_registry_whether_it_serves_the_referrers_api() {
    let distribution = TestRegistry::start();
    let referrers = support::referrers_registry::ReferrersRegistry::start();
    let ws = Workspace::new();
    let mut config = String::from("[monitor]\nstate = \"state.db\"\n\n");
    for (n, host) in [&distribution.host, &referrers.host].into_iter().enumerate() {
        let pusher = Pusher::new(host);
        pusher.push_image("apps/web", Some("latest"), &support::images::Image::new("amd64"), Format::Oci).await;
        config.push_str(&format!(
            "[[builders]]\nname = \"b{n}\"\nimage = \"{host}/demo/builder:latest\"\nwatch_run_image = false\n\n\
             [[images]]\nname = \"web{n}\"\nbuilder = \"b{n}\"\nimage = \"{host}/apps/web:latest\"\n\n"
        ));
    }
    let config = ws.config(&config);
    let out = ws.run(&["check", "--online", "--config", config.to_str().unwrap()]);
    for (host, served) in [(&distribution.host, false), (&referrers.host, true)] {
        let line = format!("ok: registry {host}: referrers: {served}");
        assert_eq!(lines_with(&out.stdout, &line).len(), 1, "{line}:\n{}\n{}", out.stdout, out.stderr);
    }
}
