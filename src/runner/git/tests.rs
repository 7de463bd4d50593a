//! `Repo::read` on a real directory: what a remote's checkout may hold that must not be followed,
//! blocked on or read whole.

use std::os::unix::fs::symlink;

use super::*;
use crate::config::Author;

fn repo(dir: &std::path::Path) -> Repo {
    let target = GitopsTarget {
        name: "fleet".into(),
        repo: "file:///nowhere".into(),
        branch: "main".into(),
        push_branch: "main".into(),
        author: Author { name: "builder-monitor".into(), email: "bm@example.com".into() },
        auth: GitAuth::None,
        files: Vec::new(),
        batch: None,
    };
    Repo::new(dir.to_path_buf(), &target)
}

#[test]
fn a_regular_file_is_read_and_a_missing_one_is_none() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("apps")).unwrap();
    std::fs::write(dir.path().join("apps/values.yaml"), "image:\n  digest: x\n").unwrap();
    let repo = repo(dir.path());
    assert_eq!(repo.read("apps/values.yaml").unwrap().as_deref(), Some("image:\n  digest: x\n"));
    assert_eq!(repo.read("apps/other.yaml").unwrap(), None);
}

#[test]
fn a_symbolic_link_is_refused_at_the_end_of_the_path_or_in_it() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.yaml"), "not the repository's\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    symlink(outside.path().join("secret.yaml"), dir.path().join("values.yaml")).unwrap();
    symlink(outside.path(), dir.path().join("apps")).unwrap();
    let repo = repo(dir.path());
    for path in ["values.yaml", "apps/secret.yaml"] {
        let error = repo.read(path).unwrap_err();
        assert!(matches!(&error, GitError::NotRegular(p) if p == path), "{path}: {error:?}");
        assert!(error.to_string().contains("symbolic link"), "{error}");
    }
    // A link inside the clone to a file inside it is refused too: the file named is what is edited.
    std::fs::write(dir.path().join("real.yaml"), "a: b\n").unwrap();
    symlink(dir.path().join("real.yaml"), dir.path().join("alias.yaml")).unwrap();
    assert!(matches!(repo.read("alias.yaml"), Err(GitError::NotRegular(_))));
}

#[test]
fn a_fifo_or_a_directory_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("mkfifo").arg(dir.path().join("pipe.yaml")).status().unwrap();
    assert!(status.success());
    std::fs::create_dir(dir.path().join("dir.yaml")).unwrap();
    let repo = repo(dir.path());
    assert!(matches!(repo.read("pipe.yaml"), Err(GitError::NotRegular(_))));
    assert!(matches!(repo.read("dir.yaml"), Err(GitError::NotRegular(_))));
}

#[test]
fn a_file_over_the_limit_is_refused_by_its_size_and_non_utf8_is_named() {
    let dir = tempfile::tempdir().unwrap();
    // Sparse: the size is what is checked, so nothing near it is read or even written.
    let big = std::fs::File::create(dir.path().join("big.yaml")).unwrap();
    big.set_len(MAX_TEXT as u64 + 1).unwrap();
    std::fs::write(dir.path().join("exact.yaml"), "a".repeat(MAX_TEXT)).unwrap();
    std::fs::write(dir.path().join("binary.yaml"), [0xff, 0xfe, 0x00]).unwrap();
    let repo = repo(dir.path());
    let error = repo.read("big.yaml").unwrap_err();
    assert!(
        matches!(&error, GitError::TooLarge { source: EditError::TooLarge { bytes }, .. } if *bytes == MAX_TEXT + 1),
        "{error:?}"
    );
    assert!(error.to_string().contains("big.yaml") && error.to_string().contains("4 MiB"), "{error}");
    assert_eq!(repo.read("exact.yaml").unwrap().map(|t| t.len()), Some(MAX_TEXT));
    assert!(matches!(repo.read("binary.yaml"), Err(GitError::NotText(p)) if p == "binary.yaml"));
}

// The remote's side, over real `git` and loopback HTTP.

/// Runs `git` in `dir` as a person would, outside the daemon's clone; panics with its stderr.
fn person(dir: &std::path::Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Pat Person")
        .env("GIT_AUTHOR_EMAIL", "pat@example.com")
        .env("GIT_COMMITTER_NAME", "Pat Person")
        .env("GIT_COMMITTER_EMAIL", "pat@example.com")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A bare repository with `main` at one commit, and `person` one commit ahead of it; the
/// directory, the bare repository's path.
fn bare_with_a_persons_branch() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let bare = dir.path().join("fleet.git");
    std::fs::create_dir(&bare).unwrap();
    person(&bare, &["init", "--quiet", "--bare", "--initial-branch=main"]);
    person(dir.path(), &["clone", "--quiet", bare.to_str().unwrap(), "work"]);
    let work = dir.path().join("work");
    person(&work, &["checkout", "--quiet", "-b", "main"]);
    std::fs::write(work.join("values.yaml"), "image:\n  digest: \"\"\n").unwrap();
    person(&work, &["add", "--all"]);
    person(&work, &["commit", "--quiet", "-m", "the values"]);
    person(&work, &["push", "--quiet", "origin", "main"]);
    std::fs::write(work.join("README.md"), "a person's docs\n").unwrap();
    person(&work, &["add", "--all"]);
    person(&work, &["commit", "--quiet", "-m", "docs by a person"]);
    person(&work, &["push", "--quiet", "origin", "HEAD:refs/heads/person"]);
    (dir, bare)
}

fn hook(bare: &std::path::Path, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    let path = bare.join("hooks").join("pre-receive");
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Our clone of `bare`, `main` checked out with one commit of ours on it, ready to push.
async fn committed(clone: &std::path::Path, bare: &std::path::Path) -> Repo {
    let mut target = repo(clone);
    target.url = format!("file://{}", bare.display());
    target.init().await.unwrap();
    let base = target.fetch("main").await.unwrap().unwrap();
    target.checkout(&base).await.unwrap();
    target.write("values.yaml", "image:\n  digest: \"sha256:1\"\n").unwrap();
    target.commit("ours\n\nBuilder-Monitor-Change: run-1\n", &["values.yaml"]).await.unwrap();
    target
}

#[tokio::test]
async fn a_push_whose_ref_a_concurrent_push_took_is_a_race_to_fetch_again() {
    let (dir, bare) = bare_with_a_persons_branch();
    // The person's push lands while ours is in receive-pack: after the refs were advertised,
    // before ours locks main. (Out of quarantine: a hook may not update refs from inside it.)
    hook(
        &bare,
        "if [ ! -e raced ]; then touch raced; env -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES git update-ref refs/heads/main refs/heads/person; fi",
    );
    let clone = dir.path().join("clone");
    let ours = committed(&clone, &bare).await;
    match ours.push("main").await {
        Ok(Push::Rejected(why)) => assert!(why.contains("[remote rejected]"), "{why}"),
        other => panic!("a lost ref lock is a race, not a refusal: {other:?}"),
    }
    let theirs = person(&bare, &["rev-parse", "refs/heads/person"]);
    assert_eq!(person(&bare, &["rev-parse", "refs/heads/main"]), theirs);
    // Fetched again and re-applied, it lands on top of theirs.
    let base = ours.fetch("main").await.unwrap().unwrap();
    assert_eq!(base, theirs);
    ours.checkout(&base).await.unwrap();
    ours.write("values.yaml", "image:\n  digest: \"sha256:1\"\n").unwrap();
    let id = ours.commit("ours\n\nBuilder-Monitor-Change: run-1\n", &["values.yaml"]).await.unwrap();
    assert_eq!(ours.push("main").await.unwrap(), Push::Pushed);
    assert_eq!(person(&bare, &["rev-parse", "refs/heads/main^"]), theirs);
    assert_eq!(ours.find_change("run-1", Some(&base)).await.unwrap(), Some(id));
}

#[tokio::test]
async fn a_pre_receive_hook_declining_the_push_is_a_final_refusal() {
    let (dir, bare) = bare_with_a_persons_branch();
    hook(&bare, "echo 'main is protected' >&2; exit 1");
    let clone = dir.path().join("clone");
    let ours = committed(&clone, &bare).await;
    let error = ours.push("main").await.unwrap_err();
    assert!(
        matches!(&error, GitError::Declined { branch, why, .. } if branch == "main" && why.contains("pre-receive hook declined")),
        "{error:?}"
    );
    assert!(error.is_final(), "trying again does not change a hook's answer");
    let text = error.to_string();
    assert!(text.starts_with("push to main of file://") && text.contains("set push_branch"), "{text}");
}

/// Reads one request's head (to its blank line, at most 64 KiB): its request line and whether it
/// carried an Authorization header.
async fn request_head(stream: &mut tokio::net::TcpStream) -> Option<(String, bool)> {
    use tokio::io::AsyncReadExt as _;
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 << 10 {
        let n = stream.read(&mut buf).await.ok()?;
        if n == 0 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let line = head.lines().next().unwrap_or_default().to_string();
    let auth = head.lines().any(|l| l.to_ascii_lowercase().starts_with("authorization:"));
    Some((line, auth))
}

/// A loopback HTTP server answering every request with `answer(request line)`; the request lines
/// it saw, each with whether it carried an Authorization header.
async fn http_server(
    ip: &str,
    answer: impl Fn(&str) -> String + Send + Sync + 'static,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<(String, bool)>>>, tokio::task::JoinHandle<()>) {
    use tokio::io::AsyncWriteExt as _;
    let listener = tokio::net::TcpListener::bind(format!("{ip}:0")).await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let Some((line, auth)) = request_head(&mut stream).await else { continue };
            let response = answer(&line);
            record.lock().unwrap().push((line, auth));
            let _ = stream.write_all(response.as_bytes()).await;
        }
    });
    (base, seen, task)
}

#[tokio::test]
async fn a_remote_that_redirects_elsewhere_gets_no_follow_and_the_other_host_no_credentials() {
    // 127.0.0.2 is loopback too, and another host to git and curl.
    let (elsewhere, reached, other) = http_server("127.0.0.2", |_| {
        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
    })
    .await;
    let target = elsewhere.clone();
    let (remote, asked, redirector) = http_server("127.0.0.1", move |line| {
        let path = line.split_whitespace().nth(1).unwrap_or("/");
        format!(
            "HTTP/1.1 302 Found\r\nLocation: {target}/moved{path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut fleet = repo(dir.path());
    fleet.url = format!("{remote}/fleet.git");
    fleet.auth = GitAuth::Token {
        username: "bot".into(),
        token: crate::config::Secret::new("token-4711"),
        env: "BM_GIT_TOKEN".into(),
    };
    fleet.init().await.unwrap();
    let error = fleet.fetch("main").await.unwrap_err();
    let GitError::Redirected { what, url, location } = &error else { panic!("{error:?}") };
    assert_eq!((*what, url.as_str()), ("fetch", fleet.url.as_str()));
    assert!(location.starts_with(&format!("{elsewhere}/moved/fleet.git/info/refs")), "{location}");
    let text = error.to_string();
    assert!(text.contains("configure the final URL as repo") && !text.contains("token-4711"), "{text}");
    assert!(error.is_final());
    assert!(reached.lock().unwrap().is_empty(), "nothing went to the other host: {:?}", reached.lock().unwrap());
    let asked = asked.lock().unwrap().clone();
    assert!(
        !asked.is_empty() && asked.iter().all(|(_, auth)| *auth),
        "the configured remote is asked, with the token: {asked:?}"
    );
    other.abort();
    redirector.abort();
}

/// Live processes (not zombies) whose command line mentions `text`.
fn processes_mentioning(text: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().chars().next()).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(text) && !matches!(state, Some('Z') | Some('X') | None)
        })
        .collect()
}

#[tokio::test]
async fn a_command_that_times_out_ends_with_every_process_it_started() {
    use tokio::io::AsyncReadExt as _;
    // A remote that takes the connection and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hung.git", listener.local_addr().unwrap());
    let (accepted, mut connections) = tokio::sync::mpsc::unbounded_channel();
    let holder = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = accepted.send(stream);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let mut hung = repo(dir.path());
    hung.url = url.clone();
    let hung = hung.with_timeout(Duration::from_secs(5));
    hung.init().await.unwrap();
    let error = hung.fetch("main").await.unwrap_err();
    assert!(
        matches!(error, GitError::Timeout { what: "fetch", after } if after == Duration::from_secs(5)),
        "{error:?}"
    );
    assert!(error.to_string().contains("every process it started were ended"), "{error}");
    assert_eq!(processes_mentioning(&url), Vec::<u32>::new(), "git-remote-http (or git) outlived the timeout");
    // The helper that held the connection is gone: the connection reads to its end.
    let mut connection = connections.try_recv().expect("git connected before its timeout");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), connection.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the hung connection is still held open");
    holder.abort();
}
