use super::*;

fn utc(text: &str) -> DateTime<Utc> {
    crate::schedule::parse_timestamp(text).unwrap()
}

fn zone(name: &str) -> TimeZone {
    TimeZone::get(name).unwrap()
}

fn window(days: &str, start: &str, end: &str, tz: &str) -> Window {
    Window::new(days, start, end, zone(tz), tz).unwrap()
}

fn weekdays(days: Days) -> Vec<&'static str> {
    DAY_NAMES.iter().filter(|(_, _, d)| days.contains(*d)).map(|(_, _, d)| short_name(*d)).collect()
}

// ---- action states ------------------------------------------------------------------------------

#[test]
fn every_state_round_trips_through_its_name() {
    for state in ActionState::ALL {
        assert_eq!(ActionState::parse(state.as_str()), Some(state));
        assert_eq!(state.to_string(), state.as_str());
        assert_eq!(serde_json::to_value(state).unwrap(), serde_json::json!(state.as_str()));
    }
    assert_eq!(ActionState::parse("held"), Some(ActionState::Held));
    assert_eq!(ActionState::parse("awaiting_approval"), Some(ActionState::AwaitingApproval));
    assert_eq!(ActionState::parse("rejected"), Some(ActionState::Rejected));
    assert_eq!(ActionState::parse("waiting"), None);
}

#[test]
fn open_states_are_those_not_finished() {
    let open: Vec<ActionState> = ActionState::ALL.into_iter().filter(|s| s.is_open()).collect();
    assert_eq!(open, [ActionState::Pending, ActionState::Running, ActionState::Held, ActionState::AwaitingApproval]);
}

// ---- days -----------------------------------------------------------------------------------------

#[test]
fn days_parse_names_ranges_and_lists() {
    let cases: [(&str, &[&str]); 10] = [
        ("Mon-Fri", &["Mon", "Tue", "Wed", "Thu", "Fri"]),
        ("Sat,Sun", &["Sat", "Sun"]),
        ("Mon-Wed,Fri", &["Mon", "Tue", "Wed", "Fri"]),
        ("Fri-Mon", &["Mon", "Fri", "Sat", "Sun"]),
        ("monday - WEDNESDAY", &["Mon", "Tue", "Wed"]),
        (" tue ", &["Tue"]),
        ("Sun-Sun", &["Sun"]),
        ("*", &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]),
        ("Daily", &["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]),
        ("Mon,mon", &["Mon"]),
    ];
    for (text, want) in cases {
        assert_eq!(weekdays(Days::parse(text).unwrap()), want, "{text}");
    }
}

#[test]
fn bad_days_say_what_was_wrong() {
    let cases = [
        ("", "no day named"),
        ("  ", "no day named"),
        ("Mo-Fr", "unknown day \"Mo\""),
        ("Mon,,Fri", "an empty entry between commas"),
        ("Mon-", "unknown day \"\""),
        ("Mon-Wed-Fri", "\"Mon-Wed-Fri\" is not a day or a range FROM-TO"),
        ("weekdays", "unknown day \"weekdays\""),
    ];
    for (text, want) in cases {
        let err = Days::parse(text).unwrap_err();
        assert_eq!(err.field(), "days");
        let message = err.to_string();
        assert!(message.starts_with(&format!("days \"{text}\": ")), "{message}");
        assert!(message.contains(want), "{text}: {message}");
    }
}

#[test]
fn days_display_as_runs() {
    for (text, shown) in
        [("Mon-Fri", "Mon-Fri"), ("Fri-Mon", "Mon,Fri-Sun"), ("Sat,Sun", "Sat,Sun"), ("daily", "daily"), ("Wed", "Wed")]
    {
        assert_eq!(Days::parse(text).unwrap().to_string(), shown);
    }
}

// ---- windows --------------------------------------------------------------------------------------

#[test]
fn window_times_are_checked() {
    let berlin = || zone("Europe/Berlin");
    let w = Window::new("Mon-Fri", "09:00", "17:30", berlin(), "Europe/Berlin").unwrap();
    assert_eq!((w.start, w.end), (9 * 60, 17 * 60 + 30));
    assert_eq!(Window::new("*", "0:00", "24:00", berlin(), "Europe/Berlin").unwrap().end, 1440);
    let cases = [
        ("24:00", "10:00", WindowError::Start("24:00".into())),
        ("9", "10:00", WindowError::Start("9".into())),
        ("09:60", "10:00", WindowError::Start("09:60".into())),
        ("09:0", "10:00", WindowError::Start("09:0".into())),
        ("-1:00", "10:00", WindowError::Start("-1:00".into())),
        ("09:00", "24:01", WindowError::End("24:01".into())),
        ("09:00", "5pm", WindowError::End("5pm".into())),
        ("09:00", "09:00", WindowError::Empty("09:00".into())),
    ];
    for (start, end, want) in cases {
        let err = Window::new("Mon", start, end, berlin(), "Europe/Berlin").unwrap_err();
        assert_eq!(err, want, "{start}-{end}");
    }
    assert_eq!(WindowError::Start("x".into()).field(), "start");
    assert_eq!(WindowError::Empty("x".into()).field(), "end");
    assert_eq!(WindowError::End("5pm".into()).to_string(), "end \"5pm\" is not a time of day HH:MM (00:00 to 24:00)");
}

#[test]
fn no_windows_is_always_open() {
    let none = Windows::default();
    let now = utc("2026-12-05T03:00:00Z");
    assert!(none.is_open(now));
    assert_eq!(none.next_open(now), None);
    assert_eq!(none.describe_next(now), None);
}

#[test]
fn a_window_is_open_from_start_up_to_end_on_its_days() {
    // Berlin is UTC+1 in December; 2026-12-07 is a Monday.
    let w = Windows(vec![window("Mon-Fri", "09:00", "17:00", "Europe/Berlin")]);
    let cases = [
        ("2026-12-07T07:59:59Z", false),
        ("2026-12-07T08:00:00Z", true),
        ("2026-12-07T15:59:59Z", true),
        ("2026-12-07T16:00:00Z", false),
        ("2026-12-11T12:00:00Z", true),  // Friday
        ("2026-12-12T12:00:00Z", false), // Saturday
    ];
    for (now, open) in cases {
        assert_eq!(w.is_open(utc(now)), open, "{now}");
    }
}

#[test]
fn an_overnight_window_belongs_to_the_day_it_starts_on() {
    let w = Windows(vec![window("Fri", "22:00", "06:00", "UTC")]);
    let cases = [
        ("2026-12-11T21:59:00Z", false), // Friday before
        ("2026-12-11T22:00:00Z", true),
        ("2026-12-12T05:59:00Z", true), // Saturday morning: still Friday's window
        ("2026-12-12T06:00:00Z", false),
        ("2026-12-12T23:00:00Z", false), // Saturday night: no window starts on Saturday
        ("2026-12-11T03:00:00Z", false), // Friday morning: Thursday has none
    ];
    for (now, open) in cases {
        assert_eq!(w.is_open(utc(now)), open, "{now}");
    }
}

#[test]
fn a_window_to_midnight_covers_the_last_minute() {
    let w = Windows(vec![window("Mon", "20:00", "24:00", "UTC")]);
    assert!(w.is_open(utc("2026-12-07T23:59:59Z")));
    assert!(!w.is_open(utc("2026-12-08T00:00:00Z")));
}

#[test]
fn windows_follow_berlin_summer_time() {
    // 2026-03-29 (a Sunday): Berlin goes from UTC+1 to UTC+2 at 02:00 local.
    let w = Windows(vec![window("daily", "09:00", "17:00", "Europe/Berlin")]);
    assert!(!w.is_open(utc("2026-03-28T07:30:00Z")), "08:30 on Saturday, winter time");
    assert!(w.is_open(utc("2026-03-29T07:30:00Z")), "09:30 on Sunday, summer time");
    assert!(!w.is_open(utc("2026-03-29T15:00:00Z")), "17:00 summer time");
    assert_eq!(w.next_open(utc("2026-03-28T20:00:00Z")), Some(utc("2026-03-29T07:00:00Z")));

    // A start inside the skipped hour opens when the clocks reach it, past the gap (02:30 → 03:30).
    let gap = Windows(vec![window("Sun", "02:30", "05:00", "Europe/Berlin")]);
    assert_eq!(gap.next_open(utc("2026-03-28T12:00:00Z")), Some(utc("2026-03-29T01:30:00Z")));
    assert!(!gap.is_open(utc("2026-03-29T01:15:00Z")));
    assert!(gap.is_open(utc("2026-03-29T01:30:00Z")));
    assert!(!gap.is_open(utc("2026-03-29T03:00:00Z")));

    // 2026-10-25: 02:00-03:00 happens twice; a start in it opens at the first one.
    let twice = Windows(vec![window("Sun", "02:30", "04:00", "Europe/Berlin")]);
    assert_eq!(twice.next_open(utc("2026-10-24T12:00:00Z")), Some(utc("2026-10-25T00:30:00Z")));
    assert!(twice.is_open(utc("2026-10-25T02:59:00Z")), "03:59 winter time");

    // A window wholly inside the skipped hour does not open that day; the next Sunday it does.
    let skipped = Windows(vec![window("Sun", "02:30", "03:00", "Europe/Berlin")]);
    assert_eq!(skipped.next_open(utc("2026-03-28T12:00:00Z")), Some(utc("2026-04-05T00:30:00Z")));
    assert_eq!(skipped.describe_next(utc("2026-03-28T12:00:00Z")).as_deref(), Some("Sun 02:30 Europe/Berlin"));
}

#[test]
fn times_beyond_the_calendar_do_not_panic() {
    let w = Windows(vec![window("Mon-Fri", "09:00", "17:00", "UTC")]);
    for now in [DateTime::<Utc>::MIN_UTC, DateTime::<Utc>::MAX_UTC] {
        assert!(!w.is_open(now) || w.next_open(now).is_none());
        let _ = w.describe_next(now);
    }
}

#[test]
fn next_open_crosses_the_weekend() {
    let w = Windows(vec![window("Mon-Fri", "09:00", "17:00", "Europe/Berlin")]);
    let friday_evening = utc("2026-12-04T18:00:00Z");
    assert!(!w.is_open(friday_evening));
    assert_eq!(w.next_open(friday_evening), Some(utc("2026-12-07T08:00:00Z")));
    assert_eq!(w.describe_next(friday_evening).as_deref(), Some("Mon 09:00 Europe/Berlin"));
    // Before Monday's opening on Monday itself.
    assert_eq!(w.next_open(utc("2026-12-07T05:00:00Z")), Some(utc("2026-12-07T08:00:00Z")));
    // Open now: nothing to wait for.
    assert_eq!(w.next_open(utc("2026-12-07T09:00:00Z")), None);
    assert_eq!(w.describe_next(utc("2026-12-07T09:00:00Z")), None);
}

#[test]
fn the_earliest_of_several_windows_is_named_in_its_own_zone() {
    let w = Windows(vec![
        window("Mon-Fri", "09:00", "17:00", "Europe/Berlin"),
        window("Sun", "20:00", "22:00", "America/New_York"),
    ]);
    let saturday = utc("2026-12-05T12:00:00Z");
    // Sunday 20:00 in New York (UTC-5) is Monday 01:00 UTC, before Berlin's Monday 08:00 UTC.
    assert_eq!(w.next_open(saturday), Some(utc("2026-12-07T01:00:00Z")));
    assert_eq!(w.describe_next(saturday).as_deref(), Some("Sun 20:00 America/New_York"));
    assert!(w.is_open(utc("2026-12-07T02:00:00Z")));
    assert!(w.is_open(utc("2026-12-07T10:00:00Z")));
    assert!(!w.is_open(utc("2026-12-07T04:00:00Z")));
}

// ---- waits ----------------------------------------------------------------------------------------

#[test]
fn waits_read_as_the_issue_shows_them() {
    let since = utc("2026-12-01T09:00:00Z");
    let cases = [
        (
            Wait::Frozen { since, reason: Some("release week".into()) },
            "frozen since 2026-12-01T09:00:00Z: release week",
            "frozen",
        ),
        (Wait::Frozen { since, reason: None }, "frozen since 2026-12-01T09:00:00Z", "frozen"),
        (
            Wait::Window { next: Some("Mon 09:00 Europe/Berlin".into()) },
            "outside windows: next opens Mon 09:00 Europe/Berlin",
            "window",
        ),
        (Wait::Window { next: None }, "outside windows: none opens again", "window"),
        (
            Wait::Wave { wave: 1, lower: 0, blocking: vec![("petclinic".into(), ActionState::Running)], more: 0 },
            "wave 1 waits for wave 0: petclinic running",
            "wave",
        ),
        (
            Wait::Wave {
                wave: 2,
                lower: 0,
                blocking: vec![
                    ("a".into(), ActionState::Running),
                    ("b".into(), ActionState::Failed),
                    ("c".into(), ActionState::Held),
                    ("d".into(), ActionState::AwaitingApproval),
                ],
                more: 0,
            },
            "wave 2 waits for wave 0: a running, b failed, c held, d awaiting approval",
            "wave",
        ),
        (Wait::InFlight { max: 2 }, "max_in_flight 2 reached for this change", "in_flight"),
    ];
    for (wait, text, code) in cases {
        assert_eq!(wait.to_string(), text);
        assert_eq!(wait.code(), code);
    }
}

// ---- the gate -------------------------------------------------------------------------------------

const NOW: &str = "2026-12-07T10:00:00Z";

fn action(key: &str, image: &str, wave: u32, state: ActionState) -> GateAction {
    GateAction {
        key: key.into(),
        image: image.into(),
        wave,
        state,
        released: false,
        created: utc("2026-12-07T09:00:00Z"),
        deploy: false,
        updated: utc("2026-12-07T09:00:00Z"),
        expedited: false,
    }
}

fn gate_now(actions: &[GateAction], rollout: &Rollout, freeze: Option<&Freeze>) -> Vec<(String, String)> {
    gate(actions, rollout, freeze, utc(NOW))
        .into_iter()
        .map(|(key, verdict)| (key, verdict.map_or_else(|w| w.to_string(), |()| "go".to_string())))
        .collect()
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[test]
fn without_rules_every_pending_action_goes_and_only_pending_ones_get_an_entry() {
    use ActionState::*;
    let actions = [
        action("a", "a", 1, Pending),
        action("b", "b", 1, Pending),
        action("c", "c", 1, Running),
        action("d", "d", 1, Held),
        action("e", "e", 1, AwaitingApproval),
        action("f", "f", 1, Failed),
    ];
    assert_eq!(gate_now(&actions, &Rollout::default(), None), pairs(&[("a", "go"), ("b", "go")]));
}

#[test]
fn a_freeze_keeps_every_pending_action_back() {
    let freeze = Freeze { since: utc("2026-12-01T09:00:00Z"), reason: Some("audit".into()), by: "ops".into() };
    let actions = [action("a", "a", 0, ActionState::Pending), action("b", "b", 1, ActionState::Pending)];
    let frozen = "frozen since 2026-12-01T09:00:00Z: audit";
    assert_eq!(gate_now(&actions, &Rollout::default(), Some(&freeze)), pairs(&[("a", frozen), ("b", frozen)]));
    let verdicts = gate(&actions, &Rollout::default(), Some(&freeze), utc(NOW));
    assert_eq!(verdicts["a"], Err(Wait::Frozen { since: utc("2026-12-01T09:00:00Z"), reason: Some("audit".into()) }));
}

#[test]
fn closed_windows_keep_pending_actions_back_and_name_the_next_opening() {
    let rollout =
        Rollout { windows: Windows(vec![window("Sat,Sun", "09:00", "17:00", "Europe/Berlin")]), ..Rollout::default() };
    let actions = [action("a", "a", 0, ActionState::Pending)];
    assert_eq!(
        gate_now(&actions, &rollout, None),
        pairs(&[("a", "outside windows: next opens Sat 09:00 Europe/Berlin")])
    );
    let open = Rollout { windows: Windows(vec![window("Mon", "09:00", "17:00", "Europe/Berlin")]), ..rollout };
    assert_eq!(gate_now(&actions, &open, None), pairs(&[("a", "go")]));
}

#[test]
fn a_freeze_is_named_before_closed_windows() {
    let rollout = Rollout {
        windows: Windows(vec![window("Sat", "09:00", "17:00", "UTC")]),
        max_in_flight: Some(1),
        ..Rollout::default()
    };
    let freeze = Freeze { since: utc("2026-12-01T09:00:00Z"), reason: None, by: "ops".into() };
    let actions = [action("a", "a", 0, ActionState::Pending), action("b", "b", 1, ActionState::Pending)];
    let frozen = "frozen since 2026-12-01T09:00:00Z";
    assert_eq!(gate_now(&actions, &rollout, Some(&freeze)), pairs(&[("a", frozen), ("b", frozen)]));
}

#[test]
fn closed_windows_are_named_before_waves() {
    let rollout = Rollout { windows: Windows(vec![window("Sat", "09:00", "17:00", "UTC")]), ..Rollout::default() };
    let actions = [action("canary", "petclinic", 0, ActionState::Running), action("b", "b", 1, ActionState::Pending)];
    assert_eq!(gate_now(&actions, &rollout, None), pairs(&[("b", "outside windows: next opens Sat 09:00 UTC")]));
}

#[test]
fn a_higher_wave_waits_for_every_lower_action_to_succeed() {
    use ActionState::*;
    let waiting = |lower_state: ActionState| {
        let actions =
            [action("canary", "petclinic", 0, lower_state), action("b", "b", 1, Pending), action("c", "c", 1, Pending)];
        gate_now(&actions, &Rollout::default(), None)
    };
    for (state, word) in
        [(Pending, "pending"), (Running, "running"), (Failed, "failed"), (Held, "held"), (Rejected, "rejected")]
    {
        let text = format!("wave 1 waits for wave 0: petclinic {word}");
        let want = if state == Pending {
            pairs(&[("b", &text), ("c", &text), ("canary", "go")])
        } else {
            pairs(&[("b", &text), ("c", &text)])
        };
        assert_eq!(waiting(state), want, "{state}");
    }
    for done in [Succeeded, Superseded] {
        assert_eq!(waiting(done), pairs(&[("b", "go"), ("c", "go")]), "{done}");
    }
}

#[test]
fn the_lowest_blocking_wave_is_named_with_all_its_blocking_images() {
    use ActionState::*;
    let actions = [
        action("w0", "canary", 0, Succeeded),
        action("w1-b", "beta", 1, Failed),
        action("w1-a", "alpha", 1, Running),
        action("w1-c", "gamma", 1, Succeeded),
        action("w2", "late", 2, Running),
        action("w3", "last", 3, Pending),
    ];
    let verdicts = gate(&actions, &Rollout::default(), None, utc(NOW));
    assert_eq!(
        verdicts["w3"],
        Err(Wait::Wave {
            wave: 3,
            lower: 1,
            blocking: vec![("alpha".into(), Running), ("beta".into(), Failed)],
            more: 0
        })
    );
    assert_eq!(verdicts.len(), 1);
    assert_eq!(verdicts["w3"].as_ref().unwrap_err().to_string(), "wave 3 waits for wave 1: alpha running, beta failed");
}

#[test]
fn a_wave_of_thousands_is_named_by_its_first_ten_and_counted() {
    use ActionState::*;
    let mut actions: Vec<GateAction> =
        (0..5000).map(|i| action(&format!("w1-{i:04}"), &format!("app-{i:04}"), 1, Running)).collect();
    actions.extend((0..5000).map(|i| action(&format!("w2-{i:04}"), &format!("late-{i:04}"), 2, Pending)));
    let verdicts = gate(&actions, &Rollout::default(), None, utc(NOW));
    assert_eq!(verdicts.len(), 5000);
    let names: Vec<String> = (0..10).map(|i| format!("app-{i:04} running")).collect();
    let text = format!("wave 2 waits for wave 1: {} and 4990 more", names.join(", "));
    assert!(verdicts.values().all(|v| v.as_ref().unwrap_err().to_string() == text), "{:?}", verdicts["w2-0000"]);
}

#[test]
fn the_same_wave_never_blocks_itself() {
    use ActionState::*;
    let actions = [action("a", "a", 1, Failed), action("b", "b", 1, Pending), action("c", "c", 2, Pending)];
    let verdicts = gate_now(&actions, &Rollout::default(), None);
    assert_eq!(verdicts[0], ("b".to_string(), "go".to_string()));
    assert_eq!(verdicts[1].1, "wave 2 waits for wave 1: a failed, b pending");
}

#[test]
fn a_released_action_skips_the_wave_rule_only() {
    use ActionState::*;
    let mut late = action("late", "b", 1, Pending);
    late.released = true;
    let actions = [action("canary", "petclinic", 0, Failed), late.clone()];
    assert_eq!(gate_now(&actions, &Rollout::default(), None), pairs(&[("late", "go")]));

    let freeze = Freeze { since: utc("2026-12-01T09:00:00Z"), reason: None, by: "ops".into() };
    assert_eq!(
        gate_now(&actions, &Rollout::default(), Some(&freeze)),
        pairs(&[("late", "frozen since 2026-12-01T09:00:00Z")])
    );
    let capped = Rollout { max_in_flight: Some(1), ..Rollout::default() };
    let actions = [action("canary", "petclinic", 0, Running), late];
    assert_eq!(gate_now(&actions, &capped, None), pairs(&[("late", "max_in_flight 1 reached for this change")]));
}

#[test]
fn max_in_flight_counts_running_actions_and_those_let_through_in_order() {
    use ActionState::*;
    let at = |key: &str, wave: u32, minute: u32| GateAction {
        created: utc(&format!("2026-12-07T09:{minute:02}:00Z")),
        ..action(key, key, wave, Pending)
    };
    let capped = Rollout { max_in_flight: Some(2), ..Rollout::default() };
    // Created later but lower wave first; the same time falls back to the key.
    let actions = [at("z", 1, 1), at("y", 1, 1), at("x", 1, 0), action("r", "r", 1, Running), at("w", 1, 5)];
    let full = "max_in_flight 2 reached for this change";
    assert_eq!(gate_now(&actions, &capped, None), pairs(&[("w", full), ("x", "go"), ("y", full), ("z", full)]));

    // A released wave 2 created first still comes after wave 1.
    let mut late = at("late", 2, 0);
    late.released = true;
    let actions = [late, at("early", 1, 30), at("b", 1, 30)];
    assert_eq!(gate_now(&actions, &capped, None), pairs(&[("b", "go"), ("early", "go"), ("late", full)]));
    let three = Rollout { max_in_flight: Some(3), ..Rollout::default() };
    assert_eq!(gate_now(&actions, &three, None), pairs(&[("b", "go"), ("early", "go"), ("late", "go")]));
}

#[test]
fn actions_kept_back_by_waves_take_no_place_in_flight() {
    use ActionState::*;
    let mut released = action("a-released", "a", 2, Pending);
    released.released = true;
    let actions =
        [action("canary", "c", 0, Succeeded), action("b", "b", 1, Failed), action("held", "h", 2, Pending), released];
    let capped = Rollout { max_in_flight: Some(1), ..Rollout::default() };
    assert_eq!(
        gate_now(&actions, &capped, None),
        pairs(&[("a-released", "go"), ("held", "wave 2 waits for wave 1: b failed")])
    );
}

// ---- held by a failure ----------------------------------------------------------------------------

#[test]
fn a_failure_holds_the_later_waves_that_have_not_started() {
    use ActionState::*;
    let actions = [
        action("canary", "petclinic", 0, Failed),
        action("c-same", "same", 0, Pending),
        action("w1-z", "z", 1, Pending),
        action("w1-a", "a", 1, AwaitingApproval),
        action("w1-run", "r", 1, Running),
        action("w1-done", "d", 1, Succeeded),
        action("w2-held", "h", 2, Held),
        action("w2", "x", 2, Pending),
        action("w3-rej", "j", 3, Rejected),
    ];
    assert_eq!(held_by_failure(&actions, "canary"), ["w1-a", "w1-z", "w2"]);
    assert_eq!(held_by_failure(&actions, "w1-run"), ["w2"]);
    assert!(held_by_failure(&actions, "w2").is_empty());
    assert!(held_by_failure(&actions, "unknown").is_empty());
}

#[test]
fn freeze_serializes_with_rfc3339_times() {
    let freeze = Freeze { since: utc("2026-12-01T09:00:00Z"), reason: Some("audit".into()), by: "ops".into() };
    let json = serde_json::to_value(&freeze).unwrap();
    assert_eq!(json, serde_json::json!({"since": "2026-12-01T09:00:00Z", "reason": "audit", "by": "ops"}));
    assert_eq!(serde_json::from_value::<Freeze>(json).unwrap(), freeze);
}

/// The next wave waits until every lower-wave deploy has stayed healthy for `soak`; a rebase of
/// the lower wave does not soak, a released action does not wait, and no soak means no wait.
#[test]
fn the_next_wave_waits_for_the_lower_waves_deploys_to_soak() {
    use ActionState::*;
    let deploy = |key: &str, wave: u32, healthy_at: &str| GateAction {
        deploy: true,
        updated: utc(healthy_at),
        ..action(key, key, wave, Succeeded)
    };
    let soaked = Rollout { soak: std::time::Duration::from_secs(600), ..Rollout::default() };
    let actions = [
        action("canary-rebase", "canary", 0, Succeeded),
        deploy("canary-deploy", 0, "2026-12-07T09:55:00Z"),
        deploy("early-deploy", 0, "2026-12-07T09:40:00Z"),
        action("app", "app", 1, Pending),
    ];
    let soaking = "wave 1 waits for wave 0's deploys to soak until 2026-12-07T10:05:00Z";
    assert_eq!(gate_now(&actions, &soaked, None), pairs(&[("app", soaking)]));
    assert_eq!(gate_now(&actions, &Rollout::default(), None), pairs(&[("app", "go")]));
    let later = gate(&actions, &soaked, None, utc("2026-12-07T10:05:00Z"));
    assert_eq!(later["app"], Ok(()));
    let mut released = actions.clone();
    released[3].released = true;
    assert_eq!(gate_now(&released, &soaked, None), pairs(&[("app", "go")]));
    // Only deploys soak: a rebase that just succeeded holds nothing back.
    let rebase_only = [action("canary-rebase", "canary", 0, Succeeded), action("app", "app", 1, Pending)];
    assert_eq!(gate_now(&rebase_only, &soaked, None), pairs(&[("app", "go")]));
}

// ---- expedite -------------------------------------------------------------------------------------

/// An expedited action goes through closed windows and a lower wave's soak, and nothing else: the
/// freeze, an unfinished lower wave and `max_in_flight` still hold it; a plain one still waits.
#[test]
fn an_expedited_action_skips_the_windows_and_the_soak_only() {
    use ActionState::*;
    let expedited = |a: GateAction| GateAction { expedited: true, ..a };
    let deploy =
        GateAction { deploy: true, updated: utc("2026-12-07T09:55:00Z"), ..action("d", "canary", 0, Succeeded) };
    let rollout = Rollout {
        windows: Windows(vec![window("Sat,Sun", "09:00", "17:00", "Europe/Berlin")]),
        soak: std::time::Duration::from_secs(600),
        ..Rollout::default()
    };
    let plain = [deploy.clone(), action("app", "app", 1, Pending)];
    assert_eq!(
        gate_now(&plain, &rollout, None),
        pairs(&[("app", "outside windows: next opens Sat 09:00 Europe/Berlin")])
    );
    let fast = [deploy.clone(), expedited(action("app", "app", 1, Pending))];
    assert_eq!(gate_now(&fast, &rollout, None), pairs(&[("app", "go")]));

    let freeze = Freeze { since: utc("2026-12-01T09:00:00Z"), reason: None, by: "ops".into() };
    assert_eq!(gate_now(&fast, &rollout, Some(&freeze)), pairs(&[("app", "frozen since 2026-12-01T09:00:00Z")]));

    let unfinished = [action("canary", "canary", 0, Running), expedited(action("app", "app", 1, Pending))];
    assert!(gate_now(&unfinished, &rollout, None)[0].1.starts_with("wave 1 waits for wave 0"));

    let capped = Rollout { max_in_flight: Some(1), ..rollout };
    let busy = [action("r", "r", 1, Running), expedited(action("app", "app", 1, Pending))];
    assert_eq!(gate_now(&busy, &capped, None), pairs(&[("app", "max_in_flight 1 reached for this change")]));
}
