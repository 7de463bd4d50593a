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
