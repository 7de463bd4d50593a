//! Process groups of local commands: tied to the daemon's life, killed whole, and recognised again
//! (by the leader's start time) after a restart so a build never has two live copies.

use std::time::Duration;

use crate::ledger::ProcessGroup;

/// How often `stop` looks whether a group is gone (it is not our child: there is no exit to await).
const POLL: Duration = Duration::from_millis(20);
/// How long SIGKILL may take to empty a group before `stop` gives up.
const KILL_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum GroupError {
    #[error("cannot signal process group {id}: {source}")]
    Signal { id: u32, source: std::io::Error },
    #[error(
        "process group {id} is still alive {} after SIGKILL (processes {members:?})",
        humantime::format_duration(KILL_WAIT)
    )]
    Survived { id: u32, members: Vec<u32> },
}

/// One line of `/proc/PID/stat`, the fields we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    parent: u32,
    group: u32,
    started: u64,
    zombie: bool,
}

fn stat(pid: u32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain anything, spaces included.
    let fields: Vec<&str> = text.get(text.rfind(')')? + 1..)?.split_whitespace().collect();
    Some(Stat {
        zombie: matches!(fields.first(), Some(&"Z") | Some(&"X")),
        parent: fields.get(1)?.parse().ok()?,
        group: fields.get(2)?.parse().ok()?,
        started: fields.get(19)?.parse().ok()?,
    })
}

/// The group `leader` (a command just started with `process_group(0)`) leads.
pub fn of_leader(leader: u32) -> ProcessGroup {
    // Without /proc (not Linux) the start time is unknown: 0 matches any process of the group.
    ProcessGroup { id: leader, started: stat(leader).map(|s| s.started).unwrap_or(0) }
}

/// Live processes of `group`. Its leader, if alive, must have the recorded start time (otherwise
/// the number was reused and the group is not ours); a group whose leader died keeps its number
/// reserved while any member lives, so members that started after the leader are ours.
fn members(group: ProcessGroup) -> Vec<u32> {
    if let Some(leader) = stat(group.id)
        && leader.group == group.id
        && leader.started != group.started
        && group.started != 0
    {
        return Vec::new();
    }
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|s| s.group == group.id && !s.zombie && s.started >= group.started))
        .collect()
}

/// The live builder-monitor that runs `group`: the parent of its leader, when the leader still
/// runs and that parent is another process of this same executable. (On Linux a leader whose
/// daemon died has died with it, so a live leader means a live daemon — unless it was reparented,
/// which the executable check tells apart.)
pub fn owner(group: ProcessGroup) -> Option<u32> {
    let leader = stat(group.id).filter(|s| s.group == group.id && s.started == group.started && !s.zombie)?;
    let exe = |pid: &str| std::fs::read_link(format!("/proc/{pid}/exe")).ok();
    let parent = leader.parent;
    (parent != std::process::id() && exe(&parent.to_string())? == exe("self")?).then_some(parent)
}

/// Whether any process of `group` is still alive.
pub fn alive(group: ProcessGroup) -> bool {
    !members(group).is_empty()
}

#[cfg(unix)]
fn signal(id: u32, signal: rustix::process::Signal) -> Result<(), GroupError> {
    let Some(pid) = rustix::process::Pid::from_raw(id as i32) else { return Ok(()) };
    match rustix::process::kill_process_group(pid, signal) {
        Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(e) => Err(GroupError::Signal { id, source: e.into() }),
    }
}

/// SIGKILL to every process of the group (the command and everything it started).
pub fn kill(id: u32) {
    #[cfg(unix)]
    if let Err(err) = signal(id, rustix::process::Signal::KILL) {
        tracing::warn!(error = %err, "cannot kill the process group");
    }
    #[cfg(not(unix))]
    let _ = id;
}

/// Makes sure a group from before a restart is gone: SIGTERM, `grace` to exit, then SIGKILL, and
/// waits until no process of it is left. A group that is already gone costs nothing.
pub async fn stop(group: ProcessGroup, grace: Duration) -> Result<(), GroupError> {
    if !alive(group) {
        return Ok(());
    }
    #[cfg(unix)]
    signal(group.id, rustix::process::Signal::TERM)?;
    if gone_within(group, grace).await {
        return Ok(());
    }
    #[cfg(unix)]
    signal(group.id, rustix::process::Signal::KILL)?;
    if gone_within(group, KILL_WAIT).await {
        return Ok(());
    }
    Err(GroupError::Survived { id: group.id, members: members(group) })
}

async fn gone_within(group: ProcessGroup, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while alive(group) {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
    true
}

/// Kills the group when dropped: whatever way a command's wait ends (exit, timeout, the task
/// aborted at shutdown), nothing it started is left behind.
pub struct KillOnDrop(pub u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        kill(self.0);
    }
}

/// On Linux, the command (the group's leader) gets SIGKILL when the daemon dies, even by SIGKILL
/// itself; its own children are stopped by the next start (`stop`) if they outlive it.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn die_with_daemon(command: &mut tokio::process::Command) {
    let daemon = rustix::process::getpid();
    // SAFETY: `pre_exec` runs the closure in the forked child before exec, where only
    // async-signal-safe work is allowed. The closure makes three system calls through rustix's
    // raw syscall wrappers (prctl, getppid) and builds its error from a raw errno: it allocates
    // nothing, takes no lock and touches no state shared with the parent.
    unsafe {
        command.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            // The daemon may have died between fork and prctl: then no signal would ever come.
            if rustix::process::getppid() != Some(daemon) {
                return Err(rustix::io::Errno::SRCH.into());
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub fn die_with_daemon(_command: &mut tokio::process::Command) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_stat() {
        let me = std::process::id();
        let s = stat(me).expect("/proc/self/stat");
        assert!(!s.zombie && s.started > 0);
        assert_eq!(stat(u32::MAX), None);
    }

    #[tokio::test]
    async fn a_reused_number_is_not_our_group() {
        let mut child = tokio::process::Command::new("sleep").arg("30").process_group(0).spawn().unwrap();
        let id = child.id().unwrap();
        let group = of_leader(id);
        assert!(alive(group));
        let stranger = ProcessGroup { id, started: group.started + 1 };
        assert!(!alive(stranger), "a leader with another start time is another group");
        stop(stranger, Duration::from_millis(10)).await.unwrap();
        assert!(alive(group), "and is left alone");
        stop(group, Duration::from_secs(5)).await.unwrap();
        child.wait().await.unwrap();
        assert!(!alive(group));
    }
}
