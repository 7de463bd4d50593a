//! Who may read the page and what a refusal leaves behind: the page needs the API token unless
//! reads are public, and a refused call or hook logs one WARN that never holds the token.

use super::*;

#[tokio::test]
async fn the_status_page_needs_a_token_unless_reads_are_public() {
    let ws = Workspace::new();
    // Nothing listens on port 9: checks fail, which the page is free to show.
    let config = ws.config(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\n\n[server]\nlisten = \"127.0.0.1:0\"\n\
         api_token_env = \"BM_TEST_API_TOKEN\"\npublic_read = false\n\n[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/demo/b:latest\"\n"
    );
    let mut daemon = Daemon::start_with_env(&config, &[("BM_TEST_API_TOKEN", TOKEN)]);
    let server = daemon.server_addr();
    let url = format!("http://{server}/");
    let http = support::http();
    assert_eq!(http.get(&url).send().await.unwrap().status(), 401);
    assert_eq!(http.get(&url).bearer_auth("wrong-token-wrong-token").send().await.unwrap().status(), 401);
    let page = http.get(&url).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("data-name=\"b\""));
    daemon.kill();
}

/// A refused API call or hook logs one WARN naming the endpoint, the client and the reason, and
/// never the token it carried (a hook's `?token=` included).
#[tokio::test]
async fn refused_calls_log_the_endpoint_client_and_reason_never_the_token() {
    let ws = Workspace::new();
    let config = ws.config(
        "[monitor]\nstate = \"state.db\"\ninterval = \"1h\"\n\n[server]\nlisten = \"127.0.0.1:0\"\n\
         api_token_env = \"BM_TEST_API_TOKEN\"\n\n[[builders]]\nname = \"b\"\nimage = \"127.0.0.1:9/demo/b:latest\"\n",
    );
    let mut daemon = Daemon::start_with_env(&config, &[("BM_TEST_API_TOKEN", TOKEN)]);
    let server = daemon.server_addr();
    let http = support::http();
    let wrong = "not-the-token-but-a-guess-1234";
    let check = format!("http://{server}/api/v1/builders/b/check");
    assert_eq!(http.post(&check).bearer_auth(wrong).send().await.unwrap().status(), 401);
    let line = daemon.wait_for("the refusal", |v| v["message"] == "request refused");
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["endpoint"], "/api/v1/builders/b/check", "{line}");
    assert_eq!(line["reason"], "missing or wrong API token", "{line}");
    assert_eq!(line["status"], 401, "{line}");
    assert!(line["client"].as_str().unwrap().starts_with("127.0.0.1:"), "{line}");

    let hook = format!("http://{server}/hooks/distribution?token={wrong}");
    assert_eq!(http.post(&hook).body("{}").send().await.unwrap().status(), 401);
    let line = daemon.wait_for("the hook refusal", |v| v["message"] == "request refused");
    assert_eq!(line["endpoint"], "/hooks/distribution", "{line}");
    assert!(!daemon.log.iter().any(|l| l.contains(wrong)), "the token reached the log:\n{}", daemon.log.join("\n"));
    daemon.kill();
}
