//! Roll-out control: which of a change's pending actions may start now, given its waves, the
//! windows, the `max_in_flight` cap and a freeze; and which later-wave actions a failure holds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, Utc};
use jiff::Timestamp;
use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use crate::plan::ActionKind;

mod expedite;
pub use expedite::{Expedite, Expedited, ExpeditedRecord, expedite, expedited_line};

/// Where an action is; stored as its snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionState {
    Pending,
    Running,
    Succeeded,
    Failed,
    /// A newer change's action for the same image replaced it before it started.
    Superseded,
    /// A lower wave of its change failed; it waits for `release` (or a newer change).
    Held,
    /// It waits for a person to `approve` (or `reject`) it.
    AwaitingApproval,
    /// A person refused it; it never runs.
    Rejected,
    /// Nothing to do, for a reason it records (a deploy whose workloads a GitOps tool owns).
    Skipped,
}

impl ActionState {
    pub const ALL: [ActionState; 9] = [
        ActionState::Pending,
        ActionState::Running,
        ActionState::Succeeded,
        ActionState::Failed,
        ActionState::Superseded,
        ActionState::Held,
        ActionState::AwaitingApproval,
        ActionState::Rejected,
        ActionState::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActionState::Pending => "pending",
            ActionState::Running => "running",
            ActionState::Succeeded => "succeeded",
            ActionState::Failed => "failed",
            ActionState::Superseded => "superseded",
            ActionState::Held => "held",
            ActionState::AwaitingApproval => "awaiting_approval",
            ActionState::Rejected => "rejected",
            ActionState::Skipped => "skipped",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }

    /// Not finished: it may still run (or is running).
    pub fn is_open(self) -> bool {
        matches!(self, ActionState::Pending | ActionState::Running | ActionState::Held | ActionState::AwaitingApproval)
    }
}

impl fmt::Display for ActionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a window (or its days) is refused; each message names the field and the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("days \"{text}\": {reason}")]
    Days { text: String, reason: String },
    #[error("start \"{0}\" is not a time of day HH:MM (00:00 to 23:59)")]
    Start(String),
    #[error("end \"{0}\" is not a time of day HH:MM (00:00 to 24:00)")]
    End(String),
    #[error("end \"{0}\" is the same as start: a window needs a length")]
    Empty(String),
}

impl WindowError {
    /// The config key the error is about (`days`, `start` or `end`), so it can be pointed at.
    pub fn field(&self) -> &'static str {
        match self {
            WindowError::Days { .. } => "days",
            WindowError::Start(_) => "start",
            WindowError::End(_) | WindowError::Empty(_) => "end",
        }
    }
}

/// A set of weekdays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Days(u8);

const DAY_NAMES: [(&str, &str, Weekday); 7] = [
    ("mon", "monday", Weekday::Monday),
    ("tue", "tuesday", Weekday::Tuesday),
    ("wed", "wednesday", Weekday::Wednesday),
    ("thu", "thursday", Weekday::Thursday),
    ("fri", "friday", Weekday::Friday),
    ("sat", "saturday", Weekday::Saturday),
    ("sun", "sunday", Weekday::Sunday),
];

fn bit(day: Weekday) -> u8 {
    1 << day.to_monday_zero_offset()
}

fn short_name(day: Weekday) -> &'static str {
    match day {
        Weekday::Monday => "Mon",
        Weekday::Tuesday => "Tue",
        Weekday::Wednesday => "Wed",
        Weekday::Thursday => "Thu",
        Weekday::Friday => "Fri",
        Weekday::Saturday => "Sat",
        Weekday::Sunday => "Sun",
    }
}

impl Days {
    pub const ALL: Days = Days(0x7f);

    /// `Mon-Fri`, `Sat,Sun`, `Mon-Wed,Fri`, `Fri-Mon` (a range wraps over the week's end), full
    /// names too, any case; `*` or `daily` is every day.
    pub fn parse(text: &str) -> Result<Days, WindowError> {
        let error = |reason: String| WindowError::Days { text: text.to_string(), reason };
        let trimmed = text.trim();
        if trimmed == "*" || trimmed.eq_ignore_ascii_case("daily") {
            return Ok(Days::ALL);
        }
        if trimmed.is_empty() {
            return Err(error("no day named (e.g. \"Mon-Fri\", \"Sat,Sun\" or \"daily\")".into()));
        }
        let mut days = Days(0);
        for part in trimmed.split(',') {
            let part = part.trim();
            if part.is_empty() {
                return Err(error("an empty entry between commas".into()));
            }
            let mut ends = part.split('-');
            let first = day(ends.next().unwrap_or_default()).map_err(&error)?;
            match (ends.next(), ends.next()) {
                (None, _) => days.0 |= bit(first),
                (Some(last), None) => {
                    let last = day(last).map_err(&error)?;
                    let mut d = first;
                    days.0 |= bit(d);
                    while d != last {
                        d = d.next();
                        days.0 |= bit(d);
                    }
                }
                (Some(_), Some(_)) => return Err(error(format!("\"{part}\" is not a day or a range FROM-TO"))),
            }
        }
        Ok(days)
    }

    pub fn contains(self, day: Weekday) -> bool {
        self.0 & bit(day) != 0
    }
}

fn day(text: &str) -> Result<Weekday, String> {
    let name = text.trim().to_ascii_lowercase();
    DAY_NAMES
        .iter()
        .find(|(short, long, _)| name == *short || name == *long)
        .map(|(_, _, d)| *d)
        .ok_or_else(|| format!("unknown day \"{}\" (use Mon, Tue, Wed, Thu, Fri, Sat, Sun or full names)", text.trim()))
}

/// Runs of consecutive days, Monday first: `Mon-Fri`, `Mon,Wed,Fri`, `daily`.
impl fmt::Display for Days {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Days::ALL {
            return f.write_str("daily");
        }
        let days: Vec<Weekday> = DAY_NAMES.iter().map(|(_, _, d)| *d).filter(|d| self.contains(*d)).collect();
        let mut runs: Vec<String> = Vec::new();
        let mut i = 0;
        while i < days.len() {
            let mut j = i;
            while j + 1 < days.len() && days[j + 1] == days[j].next() {
                j += 1;
            }
            runs.push(match j - i {
                0 => short_name(days[i]).to_string(),
                1 => format!("{},{}", short_name(days[i]), short_name(days[j])),
                _ => format!("{}-{}", short_name(days[i]), short_name(days[j])),
            });
            i = j + 1;
        }
        f.write_str(&runs.join(","))
    }
}

const DAY_MINUTES: u16 = 24 * 60;

/// Minutes after midnight of `HH:MM`; `24:00` only when `end_of_day` allows it.
fn minutes(text: &str, end_of_day: bool) -> Option<u16> {
    let (h, m) = text.trim().split_once(':')?;
    let digits = |s: &str, max_len| !s.is_empty() && s.len() <= max_len && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(h, 2) || m.len() != 2 || !digits(m, 2) {
        return None;
    }
    let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
    match (h, m) {
        (24, 0) if end_of_day => Some(DAY_MINUTES),
        (0..=23, 0..=59) => Some(h * 60 + m),
        _ => None,
    }
}

/// Days and hours, in one time zone, when actions may start. An `end` before `start` runs over
/// midnight and belongs to the day it starts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub days: Days,
    /// Minutes after local midnight.
    pub start: u16,
    /// Minutes after local midnight, up to 1440 (`24:00`).
    pub end: u16,
    pub timezone: TimeZone,
    /// The IANA name, for messages.
    pub tz_name: String,
}

impl Window {
    pub fn new(days: &str, start: &str, end: &str, tz: TimeZone, tz_name: &str) -> Result<Window, WindowError> {
        let days = Days::parse(days)?;
        let start_minutes = minutes(start, false).ok_or_else(|| WindowError::Start(start.to_string()))?;
        let end_minutes = minutes(end, true).ok_or_else(|| WindowError::End(end.to_string()))?;
        if start_minutes == end_minutes {
            return Err(WindowError::Empty(end.to_string()));
        }
        Ok(Window { days, start: start_minutes, end: end_minutes, timezone: tz, tz_name: tz_name.to_string() })
    }

    /// When the window that starts on local `date` opens and closes. Local times are turned into
    /// instants the way clocks do on DST days (a start in the spring gap moves past it).
    fn occurrence(&self, date: Date) -> Option<(Timestamp, Timestamp)> {
        let at = |date: Date, minutes: u16| {
            let date = if minutes == DAY_MINUTES { date.tomorrow().ok()? } else { date };
            let time = jiff::civil::Time::new((minutes % DAY_MINUTES / 60) as i8, (minutes % 60) as i8, 0, 0).ok()?;
            self.timezone.to_timestamp(date.to_datetime(time)).ok()
        };
        let end_date = if self.end < self.start { date.tomorrow().ok()? } else { date };
        Some((at(date, self.start)?, at(end_date, self.end)?))
    }

    fn local_date(&self, now: Timestamp) -> Date {
        self.timezone.to_datetime(now).date()
    }

    fn is_open(&self, now: Timestamp) -> bool {
        let today = self.local_date(now);
        [today.yesterday().ok(), Some(today)]
            .into_iter()
            .flatten()
            .filter(|d| self.days.contains(d.weekday()))
            .filter_map(|d| self.occurrence(d))
            .any(|(open, close)| open <= now && now < close)
    }

    /// The first opening after `now` (within the next eight days: every day set opens in a week).
    fn next_open(&self, now: Timestamp) -> Option<Timestamp> {
        let mut date = self.local_date(now);
        for _ in 0..=8 {
            // `open < close`: a window inside the skipped spring hour does not open that day.
            if self.days.contains(date.weekday())
                && let Some((open, close)) = self.occurrence(date)
                && open > now
                && open < close
            {
                return Some(open);
            }
            date = date.tomorrow().ok()?;
        }
        None
    }
}

/// The roll-out windows; none means always open.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Windows(pub Vec<Window>);

/// chrono's range is wider than jiff's; times beyond jiff's (year ±9999) are clamped. chrono
/// keeps a leap second as nanoseconds past 10^9, which jiff has no room for.
fn timestamp(t: DateTime<Utc>) -> Timestamp {
    Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos().min(999_999_999) as i32).unwrap_or(if t.timestamp() < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

fn chrono_time(t: Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.as_second(), t.subsec_nanosecond() as u32)
}

impl Windows {
    pub fn is_open(&self, now: DateTime<Utc>) -> bool {
        let now = timestamp(now);
        self.0.is_empty() || self.0.iter().any(|w| w.is_open(now))
    }

    /// The window that opens next and when; none when one is open now or none ever opens.
    fn next(&self, now: DateTime<Utc>) -> Option<(&Window, Timestamp)> {
        if self.is_open(now) {
            return None;
        }
        let now = timestamp(now);
        self.0.iter().filter_map(|w| Some((w, w.next_open(now)?))).min_by_key(|(_, t)| *t)
    }

    pub fn next_open(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        chrono_time(self.next(now)?.1)
    }

    /// When the next window opens, in its own zone: `Mon 09:00 Europe/Berlin`.
    pub fn describe_next(&self, now: DateTime<Utc>) -> Option<String> {
        let (window, at) = self.next(now)?;
        let local = window.timezone.to_datetime(at);
        Some(format!("{} {:02}:{:02} {}", short_name(local.weekday()), local.hour(), local.minute(), window.tz_name))
    }
}

/// The `[rollout]` settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollout {
    pub windows: Windows,
    /// Actions of one change running at once; `None`: no cap.
    pub max_in_flight: Option<usize>,
    /// Kinds of action that wait for a person's approval.
    pub approve: BTreeSet<ActionKind>,
    /// How long every deploy of a change's lower waves stays healthy before the next wave starts.
    pub soak: std::time::Duration,
    /// What a failed deploy puts back, unless its image says otherwise.
    pub undo: crate::deploy::Undo,
    /// How long a pod of the new template may wait in a bad state before its deploy fails.
    pub fail_after: std::time::Duration,
    /// How long a deploy may wait for health at most.
    pub deploy_timeout: std::time::Duration,
    /// A change that fixes a notice of this priority or above skips the soak and the windows
    /// (`expedite`); `None`: off.
    pub expedite: Option<crate::vulns::Priority>,
}

impl Default for Rollout {
    fn default() -> Self {
        Rollout {
            windows: Windows::default(),
            max_in_flight: None,
            approve: BTreeSet::new(),
            soak: std::time::Duration::ZERO,
            undo: crate::deploy::Undo::default(),
            fail_after: std::time::Duration::from_secs(120),
            deploy_timeout: std::time::Duration::from_secs(600),
            expedite: None,
        }
    }
}

/// The words of [`FREEZE_STOPS`], written once for the constants built from them.
macro_rules! freeze_stops {
    () => {
        "no rebase, rebuild, deploy or Git write-back starts"
    };
}

/// What a freeze stops, said in these words wherever it is said (the commands, `status`, the page,
/// alerts, `freeze --help`, docs/rollout.md): every action kind waits at the same gate.
pub const FREEZE_STOPS: &str = freeze_stops!();

/// `freeze`'s line in the command list.
pub const FREEZE_HELP: &str = concat!("Freeze the roll-out: ", freeze_stops!(), " until `unfreeze`");

/// `freeze --help`'s text: what it stops, and what goes on.
pub const FREEZE_LONG_HELP: &str = concat!(
    "Freeze the roll-out: ",
    freeze_stops!(),
    " until `unfreeze`.\n\nRunning actions finish; checks, pins and alerts go on. Kept in the ledger."
);

/// A freeze: no action starts while it lasts ([`FREEZE_STOPS`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Freeze {
    pub since: DateTime<Utc>,
    pub reason: Option<String>,
    /// Who froze (a CLI user or an API token's name).
    pub by: String,
}

/// One action of a change, as the gate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateAction {
    pub key: String,
    pub image: String,
    pub wave: u32,
    pub state: ActionState,
    /// Let go by `release`: lower waves no longer hold it back.
    pub released: bool,
    pub created: DateTime<Utc>,
    /// A deploy: once succeeded, the next wave waits for its soak.
    pub deploy: bool,
    /// Its last state change (a deploy's success: when its workloads became healthy).
    pub updated: DateTime<Utc>,
    /// Its change fixes a notice `[rollout] expedite` names: the windows and the soak do not hold
    /// it (the freeze, approvals and waves still do).
    pub expedited: bool,
}

/// Why a pending action does not start yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    Frozen {
        since: DateTime<Utc>,
        reason: Option<String>,
    },
    /// `next`: when the next window opens (`Mon 09:00 Europe/Berlin`), if ever.
    Window {
        next: Option<String>,
    },
    /// The lowest `lower` wave not done yet, and its images that are not: the first
    /// [`BLOCKING_NAMED`] by name, and how many `more`.
    Wave {
        wave: u32,
        lower: u32,
        blocking: Vec<(String, ActionState)>,
        more: usize,
    },
    InFlight {
        max: usize,
    },
    /// Another action for the same app image is running (`change` is its change): one at a time
    /// per image, so an older one can never write after a newer one.
    ImageBusy {
        image: String,
        change: String,
    },
    /// The lower waves' deploys succeeded, and soak until `until` (`[rollout] soak`).
    Soak {
        wave: u32,
        lower: u32,
        until: DateTime<Utc>,
    },
    /// The image is held by `change` (a failed or overridden deploy) until `release` or a newer
    /// change.
    ImageHeld {
        image: String,
        change: String,
    },
}

impl Wait {
    /// A stable name for JSON.
    pub fn code(&self) -> &'static str {
        match self {
            Wait::Frozen { .. } => "frozen",
            Wait::Window { .. } => "window",
            Wait::Wave { .. } => "wave",
            Wait::InFlight { .. } => "in_flight",
            Wait::ImageBusy { .. } => "image_busy",
            Wait::Soak { .. } => "soak",
            Wait::ImageHeld { .. } => "image_held",
        }
    }
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::Frozen { since, reason } => {
                write!(f, "frozen since {}", crate::schedule::timestamp(*since))?;
                match reason {
                    Some(reason) => write!(f, ": {reason}"),
                    None => Ok(()),
                }
            }
            Wait::Window { next: Some(next) } => write!(f, "outside windows: next opens {next}"),
            Wait::Window { next: None } => f.write_str("outside windows: none opens again"),
            Wait::Wave { wave, lower, blocking, more } => {
                let blocking: Vec<String> = blocking
                    .iter()
                    .map(|(image, state)| format!("{image} {}", state.as_str().replace('_', " ")))
                    .collect();
                write!(f, "wave {wave} waits for wave {lower}: {}", blocking.join(", "))?;
                match more {
                    0 => Ok(()),
                    more => write!(f, " and {more} more"),
                }
            }
            Wait::InFlight { max } => write!(f, "max_in_flight {max} reached for this change"),
            Wait::ImageBusy { image, change } => {
                write!(f, "waits for the running action of change {change} on {image} (one action per image at a time)")
            }
            Wait::Soak { wave, lower, until } => write!(
                f,
                "wave {wave} waits for wave {lower}'s deploys to soak until {}",
                crate::schedule::timestamp(*until)
            ),
            Wait::ImageHeld { image, change } => {
                write!(f, "{image} is held by change {change}: run `builder-monitor release {change}` to let it go")
            }
        }
    }
}

/// Images a wave's wait names; the rest are counted (`and 4990 more`).
pub const BLOCKING_NAMED: usize = 10;

/// Which of a change's pending actions may start now (`Ok`) and why the others wait. `actions` are
/// all of one change's actions, in any state; one entry per pending one. The rules apply in order:
/// the freeze, the windows (not for an expedited action), lower waves not yet done (unless
/// released), their soak (not for an expedited action), then `max_in_flight`,
/// counting running actions and those let through here in order of wave, creation and key.
/// In O(n log n): a claim gates a fleet's whole change each time.
pub fn gate(
    actions: &[GateAction],
    rollout: &Rollout,
    freeze: Option<&Freeze>,
    now: DateTime<Utc>,
) -> BTreeMap<String, Result<(), Wait>> {
    let mut pending: Vec<&GateAction> = actions.iter().filter(|a| a.state == ActionState::Pending).collect();
    pending.sort_by(|a, b| (a.wave, a.created, &a.key).cmp(&(b.wave, b.created, &b.key)));
    let window_wait =
        (!rollout.windows.is_open(now)).then(|| Wait::Window { next: rollout.windows.describe_next(now) });
    let mut in_flight = actions.iter().filter(|a| a.state == ActionState::Running).count();
    let mut waves = Waves::of(actions);
    let soaks = Soaks::of(actions, rollout.soak, now);
    let mut out = BTreeMap::new();
    for action in pending {
        let verdict = if let Some(freeze) = freeze {
            Err(Wait::Frozen { since: freeze.since, reason: freeze.reason.clone() })
        } else if let Some(wait) = window_wait.as_ref().filter(|_| !action.expedited) {
            Err(wait.clone())
        } else if let Some(wait) = waves.wait(action) {
            Err(wait)
        } else if let Some(wait) = soaks.wait(action).filter(|_| !action.expedited) {
            Err(wait)
        } else if let Some(max) = rollout.max_in_flight
            && in_flight >= max
        {
            Err(Wait::InFlight { max })
        } else {
            in_flight += 1;
            Ok(())
        };
        out.insert(action.key.clone(), verdict);
    }
    out
}

/// A change's actions not done (neither succeeded, superseded nor skipped), by wave; each wave's
/// blocking images sorted once, when a wait first names them.
struct Waves<'a> {
    not_done: BTreeMap<u32, Vec<&'a GateAction>>,
    named: BTreeMap<u32, (Vec<(String, ActionState)>, usize)>,
}

impl<'a> Waves<'a> {
    fn of(actions: &'a [GateAction]) -> Self {
        let mut not_done: BTreeMap<u32, Vec<&GateAction>> = BTreeMap::new();
        for a in actions {
            if !matches!(a.state, ActionState::Succeeded | ActionState::Superseded | ActionState::Skipped) {
                not_done.entry(a.wave).or_default().push(a);
            }
        }
        Waves { not_done, named: BTreeMap::new() }
    }

    /// The lowest wave below `action`'s with an action not done, unless `action` was released.
    fn wait(&mut self, action: &GateAction) -> Option<Wait> {
        if action.released {
            return None;
        }
        let (&lower, blocking) = self.not_done.range(..action.wave).next()?;
        let (named, more) = self.named.entry(lower).or_insert_with(|| {
            let mut all: Vec<(&str, ActionState)> = blocking.iter().map(|a| (a.image.as_str(), a.state)).collect();
            all.sort_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.as_str().cmp(b.1.as_str())));
            let more = all.len().saturating_sub(BLOCKING_NAMED);
            (all.into_iter().take(BLOCKING_NAMED).map(|(image, state)| (image.to_string(), state)).collect(), more)
        });
        Some(Wait::Wave { wave: action.wave, lower, blocking: named.clone(), more: *more })
    }
}

/// The soaks of a change's succeeded deploys that have not ended (`[rollout] soak`), by wave,
/// with the latest end at or below each wave.
struct Soaks {
    /// `(wave, the latest soak end in it or a lower wave, the wave that soak is in)`, by wave.
    latest: Vec<(u32, DateTime<Utc>, u32)>,
}

impl Soaks {
    fn of(actions: &[GateAction], soak: std::time::Duration, now: DateTime<Utc>) -> Self {
        if soak.is_zero() {
            return Soaks { latest: Vec::new() };
        }
        let soak = chrono::Duration::from_std(soak).unwrap_or(chrono::Duration::MAX);
        let mut ends: Vec<(u32, DateTime<Utc>)> = actions
            .iter()
            .filter(|a| a.deploy && a.state == ActionState::Succeeded)
            .map(|a| (a.wave, a.updated.checked_add_signed(soak).unwrap_or(DateTime::<Utc>::MAX_UTC)))
            .filter(|(_, until)| *until > now)
            .collect();
        ends.sort();
        let mut latest: Vec<(u32, DateTime<Utc>, u32)> = Vec::with_capacity(ends.len());
        for (wave, until) in ends {
            let (best, from) = match latest.last() {
                Some(&(_, best, from)) if best > until => (best, from),
                _ => (until, wave),
            };
            latest.push((wave, best, from));
        }
        Soaks { latest }
    }

    /// The soak of the lower waves' deploys that has not ended yet, unless `action` was released:
    /// the latest end of a soak after a lower-wave deploy succeeded.
    fn wait(&self, action: &GateAction) -> Option<Wait> {
        if action.released {
            return None;
        }
        let below = self.latest.partition_point(|(wave, _, _)| *wave < action.wave);
        let &(_, until, lower) = self.latest.get(below.checked_sub(1)?)?;
        Some(Wait::Soak { wave: action.wave, lower, until })
    }
}

/// What a change's later waves are held by: `wave 1 petclinic failed`, `canary web failed`.
pub fn failure_reason(wave: u32, image: &str) -> String {
    let wave = if wave == 0 { "canary".into() } else { format!("wave {wave}") };
    format!("{wave} {image} failed")
}

/// The keys, sorted, of the actions a failure of `failed_key` holds: those of the change in a
/// higher wave that have not started (pending or awaiting approval).
pub fn held_by_failure(actions: &[GateAction], failed_key: &str) -> Vec<String> {
    let Some(failed) = actions.iter().find(|a| a.key == failed_key) else { return Vec::new() };
    let mut keys: Vec<String> = actions
        .iter()
        .filter(|a| a.wave > failed.wave)
        .filter(|a| matches!(a.state, ActionState::Pending | ActionState::AwaitingApproval))
        .map(|a| a.key.clone())
        .collect();
    keys.sort();
    keys
}

#[cfg(test)]
mod tests;
