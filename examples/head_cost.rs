//! What one manifest `HEAD` costs the daemon's CPU through each HTTP client path (issue 44, goal
//! 3; docs/performance.md, round 4). Against a registry at HOST, N `HEAD`s of REPO:TAG from 16
//! tasks, through one of:
//!
//! - `library`: `Registry::head_manifest`, the unchanged check's path (limiter, circuit, metrics;
//!   hyper-util's pooled client since `registry::endpoint::direct`);
//! - `reqwest`: a reqwest client built as the registry client builds it, one request each;
//! - `legacy`: hyper-util's legacy pooled client;
//! - `conn`: `hyper::client::conn::http1`, one kept connection per task.
//!
//! `cargo run --release --example head_cost -- MODE HOST REPO TAG N`; count instructions with
//! `valgrind --tool=callgrind` at two N and divide the difference by theirs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use builder_monitor::config::RegistrySettings;
use builder_monitor::metrics::Metrics;
use builder_monitor::registry::{MANIFEST_ACCEPT, Registry};
use builder_monitor_core::reference::ImageRef;
use bytes::Bytes;
use http_body_util::Empty;
use hyper::header::{ACCEPT, HOST, USER_AGENT};
use hyper_util::rt::TokioIo;

const TASKS: usize = 16;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, host, repo, tag, n] = &args[..] else {
        eprintln!("usage: head_cost library|reqwest|legacy|conn HOST REPO TAG N");
        std::process::exit(2);
    };
    let n: usize = n.parse().expect("N: a number");
    builder_monitor::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let started = Instant::now();
    let cpu = || {
        let usage = std::fs::read_to_string("/proc/self/stat").unwrap();
        let fields: Vec<&str> = usage.rsplit(')').next().unwrap().split_whitespace().collect();
        (fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()) as f64 * 10.0
    };
    let cpu_before = cpu();
    runtime.block_on(async {
        let per_task = n / TASKS;
        let mut tasks = Vec::new();
        match mode.as_str() {
            "library" => {
                let mut settings = RegistrySettings::defaults_for(host);
                settings.insecure = true;
                settings.requests_per_second = None;
                let registry = Arc::new(Registry::new([settings], Metrics::new()));
                let image = ImageRef::parse(&format!("{host}/{repo}:{tag}")).unwrap();
                for _ in 0..TASKS {
                    let (registry, image) = (registry.clone(), image.clone());
                    tasks.push(tokio::spawn(async move {
                        for _ in 0..per_task {
                            registry.head_manifest(&image).await.unwrap();
                        }
                    }));
                }
            }
            "reqwest" => {
                let client = reqwest::Client::builder()
                    .user_agent("builder-monitor")
                    .timeout(Duration::from_secs(30))
                    .connect_timeout(Duration::from_secs(10))
                    .pool_idle_timeout(Duration::from_secs(90))
                    .pool_max_idle_per_host(16)
                    .redirect(reqwest::redirect::Policy::none())
                    .build()
                    .unwrap();
                let url = reqwest::Url::parse(&format!("http://{host}/v2/{repo}/manifests/{tag}")).unwrap();
                for _ in 0..TASKS {
                    let (client, url) = (client.clone(), url.clone());
                    tasks.push(tokio::spawn(async move {
                        for _ in 0..per_task {
                            let r = client.head(url.clone()).header(ACCEPT, MANIFEST_ACCEPT).send().await.unwrap();
                            assert!(r.status().is_success() && r.headers().contains_key("docker-content-digest"));
                        }
                    }));
                }
            }
            "legacy" => {
                use hyper_util::client::legacy::Client;
                let client: Client<_, Empty<Bytes>> =
                    Client::builder(hyper_util::rt::TokioExecutor::new()).build_http();
                let uri: hyper::Uri = format!("http://{host}/v2/{repo}/manifests/{tag}").parse().unwrap();
                for _ in 0..TASKS {
                    let (client, uri) = (client.clone(), uri.clone());
                    tasks.push(tokio::spawn(async move {
                        for _ in 0..per_task {
                            let request = hyper::Request::head(uri.clone())
                                .header(ACCEPT, MANIFEST_ACCEPT)
                                .header(USER_AGENT, "builder-monitor")
                                .body(Empty::new())
                                .unwrap();
                            let r = client.request(request).await.unwrap();
                            assert!(r.status().is_success() && r.headers().contains_key("docker-content-digest"));
                        }
                    }));
                }
            }
            "conn" => {
                let path: hyper::Uri = format!("/v2/{repo}/manifests/{tag}").parse().unwrap();
                for _ in 0..TASKS {
                    let (host, path) = (host.clone(), path.clone());
                    tasks.push(tokio::spawn(async move {
                        let stream = tokio::net::TcpStream::connect(&host).await.unwrap();
                        stream.set_nodelay(true).unwrap();
                        let (mut sender, connection) =
                            hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
                                .await
                                .unwrap();
                        tokio::spawn(connection);
                        for _ in 0..per_task {
                            let request = hyper::Request::head(path.clone())
                                .header(HOST, host.as_str())
                                .header(ACCEPT, MANIFEST_ACCEPT)
                                .header(USER_AGENT, "builder-monitor")
                                .body(Empty::new())
                                .unwrap();
                            sender.ready().await.unwrap();
                            let r = sender.send_request(request).await.unwrap();
                            assert!(r.status().is_success() && r.headers().contains_key("docker-content-digest"));
                        }
                    }));
                }
            }
            other => panic!("unknown mode {other}"),
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    let ms = cpu() - cpu_before;
    let n = n / TASKS * TASKS;
    println!(
        "{mode}: {n} HEADs in {:.2} s, {ms:.0} ms CPU, {:.4} ms CPU per HEAD",
        started.elapsed().as_secs_f64(),
        ms / n as f64
    );
}
