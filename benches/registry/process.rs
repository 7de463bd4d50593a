//! /proc readings of a process (CPU, memory, descriptors), a sampler, and running the reference
//! tools.

use super::*;

pub(crate) fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// utime + stime of a process, in seconds.
pub(crate) fn cpu_seconds(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 1..].split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clock_ticks())
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
pub(crate) fn status_kib(pid: &str, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))?;
    line[key.len() + 1..].split_whitespace().next()?.parse().ok()
}

pub(crate) fn open_fds(pid: &str) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    /// Seconds since the process started.
    pub(crate) t: f64,
    pub(crate) rss_kib: u64,
    pub(crate) cpu: f64,
    pub(crate) fds: usize,
    pub(crate) threads: u64,
}

/// Samples a process's RSS, CPU and open descriptors on a thread until stopped.
pub(crate) struct Sampler {
    pub(crate) stop: Arc<AtomicBool>,
    pub(crate) thread: std::thread::JoinHandle<Vec<Sample>>,
}

impl Sampler {
    pub(crate) fn start(pid: u32, since: Instant, period: Duration) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let pid = pid.to_string();
            let mut samples = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                if let (Some(rss_kib), Some(cpu)) = (status_kib(&pid, "VmRSS"), cpu_seconds(&pid)) {
                    let fds = open_fds(&pid).unwrap_or(0);
                    let threads = status_kib(&pid, "Threads").unwrap_or(0);
                    samples.push(Sample { t: since.elapsed().as_secs_f64(), rss_kib, cpu, fds, threads });
                }
                std::thread::sleep(period);
            }
            samples
        });
        Sampler { stop, thread }
    }

    pub(crate) fn finish(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// Runs a command to completion with stdout and stderr in files, sampling its CPU time.
pub(crate) fn run_tool(command: &mut Command, dir: &Path, name: &str) -> Option<(String, f64, Duration)> {
    let stdout = std::fs::File::create(dir.join(format!("{name}.out"))).ok()?;
    let stderr = std::fs::File::create(dir.join(format!("{name}.err"))).ok()?;
    let started = Instant::now();
    let mut child = match command.stdout(stdout).stderr(stderr).spawn() {
        Ok(child) => child,
        Err(err) => {
            say(format!("{name}: cannot run: {err}"));
            return None;
        }
    };
    let pid = child.id().to_string();
    let mut cpu = 0.0;
    loop {
        if let Some(c) = cpu_seconds(&pid) {
            cpu = c;
        }
        if child.try_wait().ok()?.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let elapsed = started.elapsed();
    Some((std::fs::read_to_string(dir.join(format!("{name}.out"))).unwrap_or_default(), cpu, elapsed))
}

pub(crate) fn tool_version(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    text.lines().next().map(|l| l.trim().to_string()).filter(|l| !l.is_empty())
}

/// Sum of every sample of one metric family in an OpenMetrics exposition.
pub(crate) fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
