//! Tags and the registries holding them: the fleet the benchmark pushes and its configs.

use super::*;

pub(crate) fn repo_name(r: usize) -> String {
    format!("bench/builder-{r}")
}

/// Tag `i` of the fleet: repository `i % REPOS`; every other row of ten is an index.
pub(crate) fn tag_of(i: usize) -> (String, String) {
    (repo_name(i % REPOS), format!("t{:05}", i / REPOS))
}

pub(crate) fn is_index_tag(i: usize) -> bool {
    (i / REPOS).is_multiple_of(2)
}

/// A registry holding `tags` builder tags.
pub(crate) struct Fleet {
    pub(crate) registry: TestRegistry,
    pub(crate) pid: Option<u32>,
    pub(crate) host: String,
    pub(crate) index_digests: Vec<String>,
    pub(crate) single_digests: Vec<String>,
    pub(crate) tags: usize,
}

impl Fleet {
    pub(crate) fn digest_of(&self, i: usize) -> &str {
        if is_index_tag(i) { &self.index_digests[i % REPOS] } else { &self.single_digests[i % REPOS] }
    }
}

/// How the benchmark itself writes to a registry.
#[derive(Clone)]
pub(crate) enum Access {
    Anonymous,
    /// Token auth: push tokens come from this realm with basic credentials.
    Bearer {
        realm: String,
    },
}

/// Process ids of the `docker-registry` children of this process.
pub(crate) fn registry_children() -> BTreeSet<u32> {
    let me = std::process::id();
    let mut pids = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return pids };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let comm = &stat[open + 1..close];
        let ppid = stat[close + 1..].split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok());
        if comm == "docker-registry" && ppid == Some(me) {
            pids.insert(pid);
        }
    }
    pids
}

/// Starts a registry and returns it with its process id.
pub(crate) fn start_registry(start: impl FnOnce() -> TestRegistry) -> (TestRegistry, Option<u32>) {
    let before = registry_children();
    let registry = start();
    let pid = registry_children().difference(&before).next().copied();
    pin_to_cores(pid);
    (registry, pid)
}

/// How the benchmark shares the cores when [`pinned`].
pub(crate) const PINNING: &str =
    "the registry on core 0; the benchmark, the daemon, ab, wrk and skopeo on core 1 (taskset)";

/// The fair split, on with two cores or more unless `BENCH_PIN=0`: each registry on core 0; the
/// benchmark itself on core 1, and with it everything it starts from then on (the daemon, `ab`,
/// `wrk`, `skopeo`), so the HEAD ceiling is one core's registry and the daemon's cost comes out of
/// the other core, not out of the registry's.
pub(crate) fn pinned() -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cores >= 2 && std::env::var("BENCH_PIN").map_or(true, |v| v != "0")
}

fn pin_to_cores(registry: Option<u32>) {
    if !pinned() {
        return;
    }
    let pin = |core: &str, pid: String| {
        let status = Command::new("taskset").args(["-a", "-cp", core, &pid]).stdout(Stdio::null()).status();
        assert!(status.is_ok_and(|s| s.success()), "taskset -a -cp {core} {pid} failed (BENCH_PIN=0 runs unpinned)");
    };
    if let Some(pid) = registry {
        pin("0", pid.to_string());
    }
    pin("1", std::process::id().to_string());
}

pub(crate) fn builder_images(run: &str, version: usize) -> Vec<support::images::Image> {
    let jammy = BuilderSpec::jammy(run).bump("paketo-buildpacks/java", &format!("18.1.{version}"));
    vec![jammy.clone().image(), jammy.arch("arm64").image()]
}

pub(crate) async fn push_token(http: &reqwest::Client, realm: &str, repo: &str) -> String {
    let url = format!("{realm}?service=test-registry&scope=repository:{repo}:pull,push");
    let response = http.get(url).basic_auth(USER, Some(PASSWORD)).send().await.expect("token request");
    let body = response.bytes().await.expect("token body");
    let value: Value = serde_json::from_slice(&body).expect("token JSON");
    value["token"].as_str().expect("token in answer").to_string()
}

pub(crate) async fn get_manifest(
    http: &reqwest::Client,
    host: &str,
    repo: &str,
    tag: &str,
    token: Option<&str>,
) -> (Bytes, String) {
    let mut request = http.get(format!("http://{host}/v2/{repo}/manifests/{tag}")).header("accept", MANIFEST_ACCEPT);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("GET manifest");
    assert!(response.status().is_success(), "GET {repo}:{tag}: HTTP {}", response.status());
    let media_type = response.headers()["content-type"].to_str().unwrap().to_string();
    (response.bytes().await.expect("manifest body"), media_type)
}

/// Pushes the images once per repository, then tags them `tags` times with plain manifest PUTs.
pub(crate) async fn populate(registry: TestRegistry, pid: Option<u32>, access: Access, tags: usize) -> Fleet {
    let host = registry.host.clone();
    let pusher = match access {
        Access::Anonymous => Pusher::new(&host),
        Access::Bearer { .. } => Pusher::with_basic(&host, USER, PASSWORD),
    };
    let run = format!("{host}/bench/run:latest");
    pusher
        .push_image("bench/run", Some("latest"), &support::images::Image::new("amd64").salt("run"), Format::Oci)
        .await;
    let http = support::http();
    let (mut index_digests, mut single_digests) = (Vec::new(), Vec::new());
    let started = Instant::now();
    for r in 0..REPOS {
        let repo = repo_name(r);
        let mut jammy = BuilderSpec::jammy(&run);
        jammy.description = format!("benchmark builder {r}: jammy-like, linux/amd64 + linux/arm64");
        let platforms = [jammy.clone().image(), jammy.arch("arm64").image()];
        let (index, _) = pusher.push_index(&repo, "index", &platforms, Format::Oci).await;
        let mut heroku = BuilderSpec::heroku(&run);
        heroku.run_mirrors.clear();
        heroku.description = format!("benchmark builder {r}: heroku-like, one Docker manifest");
        let single = pusher.push_image(&repo, Some("single"), &heroku.image(), Format::Docker).await;
        let token = match &access {
            Access::Anonymous => None,
            Access::Bearer { realm } => Some(push_token(&http, realm, &repo).await),
        };
        let index_manifest = get_manifest(&http, &host, &repo, "index", token.as_deref()).await;
        let single_manifest = get_manifest(&http, &host, &repo, "single", token.as_deref()).await;
        assert_eq!(sha256(&index_manifest.0), index.digest);
        assert_eq!(sha256(&single_manifest.0), single.digest);
        let rows: Arc<Vec<usize>> = Arc::new((r..tags).step_by(REPOS).collect());
        let next = Arc::new(AtomicUsize::new(0));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..CONCURRENCY {
            let (rows, next, http, host, repo, token) =
                (rows.clone(), next.clone(), http.clone(), host.clone(), repo.clone(), token.clone());
            let (index_manifest, single_manifest) = (index_manifest.clone(), single_manifest.clone());
            workers.spawn(async move {
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&i) = rows.get(k) else { break };
                    let (bytes, media_type) = if is_index_tag(i) { &index_manifest } else { &single_manifest };
                    let (_, tag) = tag_of(i);
                    let mut request = http
                        .put(format!("http://{host}/v2/{repo}/manifests/{tag}"))
                        .header("content-type", media_type.as_str())
                        .body(bytes.clone());
                    if let Some(token) = &token {
                        request = request.bearer_auth(token);
                    }
                    let status = request.send().await.expect("PUT manifest").status();
                    assert_eq!(status.as_u16(), 201, "PUT {repo}:{tag}");
                }
            });
        }
        while let Some(done) = workers.join_next().await {
            done.expect("tagging worker");
        }
        index_digests.push(index.digest);
        single_digests.push(single.digest);
    }
    say(format!("{host}: {tags} tags over {REPOS} repositories in {:.1}s", started.elapsed().as_secs_f64()));
    Fleet { registry, pid, host, index_digests, single_digests, tags }
}

/// A daemon configuration watching the first `n` tags of `host` (rate limit off, no run image
/// watches). `upstream`: the registry behind a proxy, which the builders' run image names.
pub(crate) fn config_text(host: &str, upstream: &str, n: usize, interval: &str, jitter: &str, server: &str) -> String {
    let mut text = format!("[monitor]\nstate = \"state.db\"\ninterval = \"{interval}\"\njitter = \"{jitter}\"\n\n");
    if !server.is_empty() {
        let _ = writeln!(text, "[server]\n{server}\n");
    }
    for h in BTreeSet::from([host, upstream]) {
        let _ = writeln!(text, "[registries.\"{h}\"]\nrequests_per_second = 0\n");
    }
    for i in 0..n {
        let (repo, tag) = tag_of(i);
        let _ = writeln!(
            text,
            "[[builders]]\nname = \"b{i:05}\"\nimage = \"{host}/{repo}:{tag}\"\nwatch_run_image = false\n"
        );
    }
    text
}
