//! D1: the download of a URL mirror follows a redirect only within the configured URL's origin,
//! never sends `Referer`, and refuses plain HTTP off loopback at every hop, saying so.

use super::*;

fn config(ws: &Workspace, url: &str) -> std::path::PathBuf {
    ws.config(&format!(
        "[monitor]\nstate = \"state/ledger.db\"\n\n[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/demo/b:latest\"\n\n\
         [vulnerabilities]\nosv = \"{url}\"\nreleases = [\"22.04\"]\n"
    ))
}

fn run_once_any(ws: &Workspace, config: &std::path::Path) -> Vec<Value> {
    let out = ws.run(&["run", "--once", "--log-format", "json", "--config", config.to_str().unwrap()]);
    out.stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn refresh_error(lines: &[Value]) -> String {
    let failed = with_message(lines, "the OSV mirror's refresh failed");
    assert_eq!(failed.len(), 1, "{lines:#?}");
    failed[0]["error"].as_str().unwrap().to_string()
}

#[test]
fn a_redirect_to_another_origin_or_to_plain_http_off_loopback_is_not_followed() {
    // The other origin serves a good archive: following it would put that host's data in force.
    let elsewhere = Mirror::start(Answer::Archive(archive(), "\"other\""));
    let mirror = Mirror::start(Answer::Redirect(elsewhere.url.clone(), Vec::new()));
    let ws = Workspace::new();
    let config = config(&ws, &format!("{}?token=s3cret", mirror.url));

    let lines = run_once_any(&ws, &config);
    let error = refresh_error(&lines);
    let origin = elsewhere.url.split("/osv").next().unwrap();
    assert!(
        error.contains(&format!("redirects to {origin}/…, another origin than the configured URL's: not followed")),
        "{error}"
    );
    assert!(with_message(&lines, "vulnerability data loaded").is_empty(), "{lines:#?}");
    assert!(elsewhere.requests.lock().unwrap().is_empty(), "the other origin is never asked");
    assert!(!lines.iter().any(|l| l.to_string().contains("s3cret")), "{lines:#?}");

    // Plain HTTP off loopback, at a hop: refused for that (192.0.2.1 is never contacted).
    mirror.answer(Answer::Redirect("http://192.0.2.1/osv.tar.gz".into(), Vec::new()));
    let error = refresh_error(&run_once_any(&ws, &config));
    assert!(error.contains("redirects to http://192.0.2.1/…, plain HTTP off loopback: not followed"), "{error}");
    assert!(!ws.path("state/osv/osv.tar.gz").exists());
}

#[test]
fn a_redirect_within_the_origin_is_followed_without_a_referer() {
    let mirror = Mirror::start(Answer::Redirect("/moved/ubuntu.tar.gz".into(), archive()));
    let ws = Workspace::new();
    let config = config(&ws, &format!("{}?token=s3cret", mirror.url));

    let lines = run_once_any(&ws, &config);
    assert_eq!(with_message(&lines, "vulnerability data loaded").len(), 1, "{lines:#?}");
    let requests = mirror.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    assert!(requests[1].starts_with("get /moved/ubuntu.tar.gz "), "{requests:#?}");
    assert!(requests.iter().all(|r| !r.contains("referer:")), "no Referer: {requests:#?}");
}
