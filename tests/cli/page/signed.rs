//! The signed/unsigned mark of each app image, in Chromium, after the real daemon acted under
//! `require_signed` against the real registry: the app a trusted key signed is rebased and
//! re-signed by our key (a `signed` mark, our key id on hover), the unsigned one is refused (an
//! `unsigned` mark), and an image no action touched carries no mark.

use super::*;

use builder_monitor::metrics::Metrics;
use builder_monitor::registry::Registry;
use support::app::{self, App, RunImage};
use support::keys;

/// Each app image's row as the browser built it: its name, its mark's classes, text and title
/// (null without a mark), and how many marks it has.
const MARKS: &str = "[...document.querySelectorAll('tr.image')].map(row => { \
    const mark = row.querySelector('.pill.signed, .pill.unsigned'); \
    return { name: row.dataset.name, marks: row.querySelectorAll('.pill.signed, .pill.unsigned').length, \
             class: mark && mark.className, text: mark && mark.innerText, title: mark && mark.title }; })";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_marks_a_signed_rebase_and_an_unsigned_refusal_in_chromium() {
    let Some(chromium) = chromium() else { return };
    let registry = TestRegistry::start();
    let host = registry.host.clone();
    let pusher = Pusher::new(&host);
    let ws = Workspace::new();
    let ours = keys::p256(ws.dir.path(), "own.pem");
    let kpack = keys::p256(ws.dir.path(), "kpack.pem");

    let run_tag = format!("{host}/demo/run:latest");
    let run_v1 = RunImage::jammy("1", 3);
    let pushed = app::push_run(&pusher, "demo/run", Some("latest"), &run_v1, Format::Oci).await;
    pusher.push_image("demo/builder", Some("latest"), &BuilderSpec::jammy(&run_tag).image(), Format::Oci).await;
    let built = App::on(&run_v1, &run_tag, &format!("{host}/demo/run@{}", pushed.digest));
    builder_monitor::install_crypto_provider();
    let client = Registry::new([], Metrics::new());
    let mut images = String::new();
    // good: kpack signed it; bare: nobody did; plain: alerts only, so nothing is ever checked.
    for (name, policy) in [("good", "rebase"), ("bare", "rebase"), ("plain", "notify")] {
        let digest = app::push_app(&pusher, &format!("apps/{name}"), Some("latest"), &built, Format::Oci).await.digest;
        if name == "good" {
            let image = ImageRef::parse(&format!("{host}/apps/{name}:latest")).unwrap();
            keys::sign(&client, &image, &digest, &kpack).await;
        }
        images.push_str(&format!(
            "[[images]]\nname = \"{name}\"\nbuilder = \"jammy\"\nimage = \"{host}/apps/{name}:latest\"\npolicy = \"{policy}\"\n\n"
        ));
    }
    let config = ws.config(&format!(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\njitter = \"0s\"\n\n\
         [server]\nlisten = \"127.0.0.1:0\"\napi_token_env = \"BM_TEST_API_TOKEN\"\npublic_read = true\n\n\
         [[builders]]\nname = \"jammy\"\nimage = \"{host}/demo/builder:latest\"\n\n{images}\
         [runner]\ntype = \"none\"\nrebase = \"registry\"\n\n\
         [signing]\nkey = \"own.pem\"\ntrusted_keys = [\"kpack.pem.pub\"]\nrequire_signed = true\n"
    ));
    let mut daemon = Daemon::start_with_env(&config, &[("BM_TEST_API_TOKEN", TOKEN)]);
    let server = daemon.server_addr();
    let run_watch = run_watch_name(&ImageRef::parse(&run_tag).unwrap());
    wait_for_all(&mut daemon, "the first checks", vec![checked("jammy", "Pinned"), checked(&run_watch, "Pinned")]);

    // The run image moves: good is rebased (and signed by our key), bare is refused.
    app::push_run(&pusher, "demo/run", Some("latest"), &RunImage::jammy("2", 4), Format::Oci).await;
    // A run image watch's name holds slashes: percent-encoded in the path.
    let url = format!("http://{server}/api/v1/watches/{}/check", run_watch.replace('/', "%2F"));
    assert_eq!(support::http().post(url).bearer_auth(TOKEN).send().await.unwrap().status(), 202);
    let ended = |message: &'static str, image: &'static str| -> LogLine<'static> {
        Box::new(move |v| v["message"] == message && v["image"] == image)
    };
    wait_for_all(
        &mut daemon,
        "good rebased, bare refused",
        vec![ended("action succeeded", "good"), ended("action failed for good", "bare")],
    );

    let url = format!("http://{server}/");
    let marks = tokio::task::spawn_blocking(move || evaluate(&chromium, &url, (1280, 900), MARKS)).await.unwrap();
    let (status, _) = daemon.terminate();
    assert!(status.success());
    let row = |name: &str| {
        marks.as_array().unwrap().iter().find(|r| r["name"] == name).cloned().unwrap_or_else(|| {
            panic!("no app image row for {name}: {marks:#}");
        })
    };
    let good = row("good");
    assert_eq!((good["marks"].as_u64(), good["text"].as_str()), (Some(1), Some("signed")), "{good:#}");
    assert_eq!(good["class"], "pill ok signed", "{good:#}");
    assert_eq!(good["title"], format!("signed by key {}", ours.key_id()), "re-signed by our key: {good:#}");
    let bare = row("bare");
    assert_eq!((bare["marks"].as_u64(), bare["text"].as_str()), (Some(1), Some("unsigned")), "{bare:#}");
    assert_eq!(bare["class"], "pill err unsigned", "{bare:#}");
    assert_eq!(bare["title"], "no valid signature by a trusted key", "{bare:#}");
    let plain = row("plain");
    assert_eq!((plain["marks"].as_u64(), &plain["class"]), (Some(0), &serde_json::Value::Null), "{plain:#}");
}
