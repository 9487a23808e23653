//! Converts the real nsys capture in tests/fixtures (made from ../shared/gen/nvtx_workload.c, see
//! tests/fixtures/README.md) and checks what that program is known to have done, NVTX feature by
//! NVTX feature. Needs nothing outside the repository.

use crate::common;

use crate::common::{Slice, Trace, convert, fixture, validate_file};
use nsys_perfetto_model::category::Category;
use std::collections::{BTreeMap, BTreeSet};

const WORKERS: [&str; 3] = ["worker-0", "worker-1", "worker-2"];
const STEPS: i64 = 50;

fn converted() -> (
    nsys_perfetto_model::summary::Summary,
    Trace,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let (summary, out) = convert(&fixture("nvtx_workload.sqlite"), dir.path());
    let trace = validate_file(&out);
    (summary, trace, dir)
}

/// The thread track uuid of the thread with this name.
fn thread_uuid(t: &Trace, name: &str) -> u64 {
    let found: Vec<_> = t
        .thread_tracks()
        .filter(|tr| tr.thread.as_ref().unwrap().name.as_deref() == Some(name))
        .collect();
    assert_eq!(found.len(), 1, "one thread track named {name:?}: {found:?}");
    found[0].uuid
}

fn tid_of(t: &Trace, name: &str) -> i64 {
    t.track(thread_uuid(t, name)).thread.as_ref().unwrap().tid as i64
}

/// The custom track named `name` directly under `parent`.
fn child_named(t: &Trace, parent: u64, name: &str) -> u64 {
    let found: Vec<_> = t
        .children(parent)
        .into_iter()
        .filter(|c| c.name.as_deref() == Some(name))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one track named {name:?} under {:?}; children: {:?}",
        t.track_name(parent),
        t.children(parent)
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    );
    found[0].uuid
}

fn on_track(t: &Trace, track: u64) -> Vec<&Slice> {
    let mut v: Vec<&Slice> = t.slices.iter().filter(|s| s.track == track).collect();
    v.sort_by_key(|s| (s.start, s.depth));
    v
}

#[test]
fn summary_counts_every_row() {
    let (summary, trace, _dir) = converted();
    // Per worker: 50 x (step, forward, backward, default-domain work); plus 2 start/end ranges.
    assert_eq!(summary.events_of(Category::Nvtx), 3 * 4 * STEPS as u64 + 2);
    // 5 checkpoints per worker, one "done" on the main thread.
    assert_eq!(summary.events_of(Category::NvtxMark), 3 * 5 + 1);
    assert!(
        summary.skipped.is_empty(),
        "nothing skipped: {:?}",
        summary.skipped
    );
    // 2 category names, 2 domain creations, 3 thread names.
    assert_eq!(summary.naming_rows.get("NVTX_EVENTS"), Some(&7));
    assert_eq!(summary.flows, 0);
    let by_cat = trace.count_by_category();
    assert_eq!(by_cat.get("nvtx"), Some(&602), "{by_cat:?}");
    assert_eq!(by_cat.get("nvtx.mark"), Some(&16), "{by_cat:?}");
    assert!(
        !by_cat.keys().any(|c| c.starts_with("cuda.")),
        "no CUDA in a CPU-only capture: {by_cat:?}"
    );
    assert!(trace.flows.is_empty());
}

fn is_nvtx(s: &Slice) -> bool {
    &*s.category == "nvtx" || &*s.category == "nvtx.mark"
}

/// Whether NVTX slices lie on this track or below it.
fn carries_nvtx(t: &Trace, uuid: u64) -> bool {
    t.slices
        .iter()
        .filter(|s| is_nvtx(s))
        .any(|s| t.ancestry(s.track).iter().any(|a| a.uuid == uuid))
}

/// Names of the children of `uuid` that carry NVTX slices, sorted.
fn nvtx_children(t: &Trace, uuid: u64) -> Vec<String> {
    let mut v: Vec<String> = t
        .children(uuid)
        .into_iter()
        .filter(|c| carries_nvtx(t, c.uuid))
        .map(|c| c.name.clone().unwrap_or_default())
        .collect();
    v.sort();
    v
}

#[test]
fn process_and_thread_names() {
    let (_s, t, _dir) = converted();
    let procs: Vec<_> = t.process_tracks().collect();
    assert_eq!(procs.len(), 1, "one profiled process: {procs:?}");
    let p = procs[0].process.as_ref().unwrap();
    assert_eq!(
        p.name.as_deref(),
        Some("./nvtx_workload"),
        "name from PROCESSES"
    );
    for tr in t.thread_tracks() {
        assert_eq!(
            tr.thread.as_ref().unwrap().pid,
            p.pid,
            "threads belong to the process"
        );
    }
    let mut names: Vec<String> = t
        .thread_tracks()
        .filter(|tr| carries_nvtx(&t, tr.uuid))
        .map(|tr| tr.thread.as_ref().unwrap().name.clone().unwrap_or_default())
        .collect();
    names.sort();
    // The main thread (its "done" mark) and the workers, named by ThreadNames and
    // nvtxNameOsThreadA.
    assert_eq!(names, ["nvtx_workload", "worker-0", "worker-1", "worker-2"]);
    let main = t
        .track(thread_uuid(&t, "nvtx_workload"))
        .thread
        .clone()
        .unwrap();
    assert_eq!(main.tid, main.pid, "the main thread's tid is the pid");
}

#[test]
fn domains_become_tracks_under_threads_and_process() {
    let (_s, t, _dir) = converted();
    for w in WORKERS {
        let th = thread_uuid(&t, w);
        // nvtxDomainCreateA("Trainer") and the default domain, shown by nsys as "NVTX".
        assert_eq!(
            nvtx_children(&t, th),
            ["NVTX", "Trainer"],
            "domain tracks of {w}"
        );
        // Nothing NVTX sits on the thread track itself.
        assert!(!t.slices.iter().any(|s| is_nvtx(s) && s.track == th));
    }
    let main = thread_uuid(&t, "nvtx_workload");
    assert_eq!(
        nvtx_children(&t, main),
        ["DataLoader"],
        "the main thread only marks in DataLoader"
    );
    let proc_uuid = t.process_tracks().next().unwrap().uuid;
    let kids: Vec<String> = nvtx_children(&t, proc_uuid)
        .into_iter()
        .filter(|n| !n.starts_with("nvtx_workload") && !n.starts_with("worker-"))
        .collect();
    assert_eq!(kids, ["DataLoader (start/end)", "NVTX (start/end)"]);
}

#[test]
fn push_pop_ranges_nest_per_thread() {
    let (_s, t, _dir) = converted();
    for w in WORKERS {
        let th = thread_uuid(&t, w);
        let trainer = on_track(&t, child_named(&t, th, "Trainer"));
        let steps: Vec<&&Slice> = trainer.iter().filter(|s| &*s.name == "step").collect();
        assert_eq!(steps.len(), STEPS as usize, "{w}: 50 steps");
        // Steps are top-level; each holds one forward then one backward, one level down.
        for (i, step) in steps.iter().enumerate() {
            assert_eq!(step.depth, 0, "{w} step {i} at top level");
            let kids: Vec<&&Slice> = trainer
                .iter()
                .filter(|s| s.start >= step.start && s.end <= step.end && s.depth == 1)
                .collect();
            let names: Vec<&str> = kids.iter().map(|s| &*s.name).collect();
            assert_eq!(names, ["forward", "backward"], "{w} step {i} children");
            assert!(
                kids[0].end <= kids[1].start,
                "forward pops before backward pushes"
            );
        }
        let depths: BTreeSet<u32> = trainer.iter().map(|s| s.depth).collect();
        assert_eq!(
            depths,
            BTreeSet::from([0, 1]),
            "{w}: Trainer ranges are two deep"
        );
        assert_eq!(trainer.len(), 3 * STEPS as usize);

        let default = on_track(&t, child_named(&t, th, "NVTX"));
        let work: Vec<&&Slice> = default.iter().filter(|s| !s.instant).collect();
        assert_eq!(work.len(), STEPS as usize);
        for s in &work {
            assert_eq!(&*s.name, "default-domain work");
            assert_eq!(s.depth, 0);
            assert_eq!(&*s.category, "nvtx");
            assert!(
                s.args.is_empty(),
                "nvtxRangePushA has no attributes: {:?}",
                s.args
            );
            assert!(s.dur() >= 100_000, "usleep(100) inside: {} ns", s.dur());
        }
        // Every slice of a worker ends before the next step of the same worker starts.
        for pair in steps.windows(2) {
            assert!(pair[0].end <= pair[1].start);
        }
    }
}

#[test]
fn registered_strings_colors_categories_payloads() {
    let (_s, t, _dir) = converted();
    for w in WORKERS {
        let th = thread_uuid(&t, w);
        let trainer = on_track(&t, child_named(&t, th, "Trainer"));
        let mut step_payloads = Vec::new();
        let mut bwd_payloads = Vec::new();
        for s in &trainer {
            assert_eq!(&*s.category, "nvtx");
            match &*s.name {
                "step" => {
                    assert_eq!(s.arg_str("color"), Some("#3366cc"), "0xFF3366CC");
                    // Category 1 of the Trainer domain is "TrainStep" (nvtxDomainNameCategoryA);
                    // "Training" names category 1 of the default domain only.
                    assert_eq!(s.arg_str("category"), Some("TrainStep"));
                    assert!(
                        matches!(s.arg("payload"), Some(common::Arg::Int(_))),
                        "int64 payload: {:?}",
                        s.args
                    );
                    step_payloads.push(s.arg_int("payload").unwrap());
                }
                // Registered strings (nvtxDomainRegisterStringA): names from StringIds.
                "forward" => {
                    assert_eq!(s.arg_str("color"), Some("#00aa00"), "0xFF00AA00");
                    assert_eq!(s.arg("payload"), None, "forward has no payload");
                    assert_eq!(s.arg("category"), None);
                }
                "backward" => {
                    assert_eq!(s.arg_str("color"), Some("#aa0000"), "0xFFAA0000");
                    match s.arg("payload") {
                        Some(common::Arg::Double(d)) => bwd_payloads.push(*d),
                        other => panic!("double payload on backward: {other:?}"),
                    }
                }
                other => panic!("unexpected range {other:?} in Trainer"),
            }
        }
        assert_eq!(
            step_payloads,
            (0..STEPS).collect::<Vec<_>>(),
            "{w}: payload i"
        );
        let expect: Vec<f64> = (0..STEPS).map(|i| 0.5 * i as f64).collect();
        assert_eq!(bwd_payloads, expect, "{w}: payload 0.5*i");
    }
}

#[test]
fn marks_are_instants() {
    let (_s, t, _dir) = converted();
    let marks: Vec<&Slice> = t.instants().filter(|s| is_nvtx(s)).collect();
    assert_eq!(marks.len(), 16);
    for m in &marks {
        assert_eq!(&*m.category, "nvtx.mark");
        assert_eq!(m.dur(), 0);
    }
    for w in WORKERS {
        let th = thread_uuid(&t, w);
        let nvtx = child_named(&t, th, "NVTX");
        let cps: Vec<&&Slice> = marks.iter().filter(|m| m.track == nvtx).collect();
        assert_eq!(cps.len(), 5, "{w}: a checkpoint every 10 steps");
        assert!(cps.iter().all(|m| &*m.name == "checkpoint" && m.depth == 0));
    }
    let main = thread_uuid(&t, "nvtx_workload");
    let done: Vec<&&Slice> = marks
        .iter()
        .filter(|m| m.track == child_named(&t, main, "DataLoader"))
        .collect();
    assert_eq!(done.len(), 1);
    assert_eq!(&*done[0].name, "done");
    let last = t
        .ranges()
        .filter(|s| is_nvtx(s))
        .map(|s| s.end)
        .max()
        .unwrap();
    assert!(
        done[0].start >= last,
        "done is marked after everything ended"
    );
}

#[test]
fn start_end_ranges_live_on_the_process() {
    let (_s, t, _dir) = converted();
    let proc_uuid = t.process_tracks().next().unwrap().uuid;
    let main_tid = tid_of(&t, "nvtx_workload");
    let w0 = tid_of(&t, "worker-0");

    let cross = on_track(&t, child_named(&t, proc_uuid, "NVTX (start/end)"));
    assert_eq!(cross.len(), 1);
    let c = cross[0];
    assert_eq!(&*c.name, "cross-thread range");
    assert_eq!(
        c.arg_int("tid"),
        Some(main_tid),
        "started on the main thread"
    );
    assert_eq!(c.arg_int("end_tid"), Some(w0), "ended by worker-0");
    // worker-0 ends it right after its step with payload 25.
    let trainer0 = on_track(&t, child_named(&t, thread_uuid(&t, "worker-0"), "Trainer"));
    let step = |p: i64| {
        *trainer0
            .iter()
            .find(|s| &*s.name == "step" && s.arg_int("payload") == Some(p))
            .unwrap()
    };
    assert!(
        c.end >= step(25).end && c.end <= step(26).start,
        "ends between steps 25 and 26"
    );

    let io = on_track(&t, child_named(&t, proc_uuid, "DataLoader (start/end)"));
    assert_eq!(io.len(), 1);
    let p = io[0];
    assert_eq!(&*p.name, "prefetch");
    assert_eq!(p.arg_str("color"), Some("#ffaa00"), "0xFFFFAA00");
    assert_eq!(p.arg_int("tid"), Some(main_tid));
    assert_eq!(
        p.arg("end_tid"),
        None,
        "ended on the thread that started it"
    );
    // Started before the workers, ended after they were joined.
    for w in WORKERS {
        let th = thread_uuid(&t, w);
        for s in t
            .slices
            .iter()
            .filter(|s| is_nvtx(s) && t.ancestry(s.track).iter().any(|a| a.uuid == th))
        {
            assert!(
                p.start <= s.start && s.end <= p.end,
                "{w} work inside prefetch"
            );
        }
    }
    assert!(c.start < c.end && p.start < p.end);
}

#[test]
fn every_slice_has_a_named_track_and_known_name() {
    let (_s, t, _dir) = converted();
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for s in t.slices.iter().filter(|s| is_nvtx(s)) {
        *names.entry(&s.name).or_default() += 1;
    }
    let expect: BTreeMap<&str, usize> = [
        ("step", 150),
        ("forward", 150),
        ("backward", 150),
        ("default-domain work", 150),
        ("checkpoint", 15),
        ("done", 1),
        ("cross-thread range", 1),
        ("prefetch", 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(names, expect);
    for tr in t.tracks.values() {
        assert!(
            !t.track_name(tr.uuid).is_empty(),
            "every track is named: {tr:?}"
        );
    }
}

#[test]
fn trace_processor_accepts_it() {
    let (_s, _t, dir) = converted();
    let out = dir.path().join("nvtx_workload.pftrace");
    match common::tpcheck(&out) {
        None => {}
        Some(Ok(_)) => {}
        Some(Err(report)) => panic!("tpcheck --strict failed:\n{report}"),
    }
}

/// The validator itself: each rule is caught when the fixture's output is broken on purpose.
mod validator_catches {
    use super::common::{self, validate};
    use nsys_perfetto_write::proto::{self, TracePacket, trace_packet, track_event};
    use prost::Message;

    fn packets() -> Vec<TracePacket> {
        let dir = tempfile::tempdir().unwrap();
        let (_s, out) = common::convert(&common::fixture("nvtx_workload.sqlite"), dir.path());
        let bytes = std::fs::read(out).unwrap();
        validate(&bytes).expect("the unmodified output is valid");
        proto::Trace::decode(&bytes[..]).unwrap().packet
    }

    fn encode(packet: Vec<TracePacket>) -> Vec<u8> {
        proto::Trace { packet }.encode_to_vec()
    }

    fn expect(bytes: &[u8], rule: &str) {
        match validate(bytes) {
            Ok(_) => panic!("the validator missed a broken rule: {rule}"),
            Err(v) => assert!(v.per_rule.contains_key(rule), "want {rule:?}, got:\n{v}"),
        }
    }

    fn event(p: &TracePacket) -> Option<&proto::TrackEvent> {
        match &p.data {
            Some(trace_packet::Data::TrackEvent(e)) => Some(e),
            _ => None,
        }
    }

    fn is_type(p: &TracePacket, t: track_event::Type) -> bool {
        event(p).is_some_and(|e| e.r#type == Some(t as i32))
    }

    #[test]
    fn missing_sequence_id() {
        let mut p = packets();
        let i = p.iter().position(|p| event(p).is_some()).unwrap();
        p[i].optional_trusted_packet_sequence_id = None;
        expect(&encode(p), common::R_SEQUENCE_ID);
    }

    #[test]
    fn undefined_interned_name() {
        let mut p = packets();
        let i = p
            .iter()
            .position(|p| {
                p.interned_data
                    .as_ref()
                    .is_some_and(|d| !d.event_names.is_empty())
            })
            .unwrap();
        p[i].interned_data.as_mut().unwrap().event_names.clear();
        expect(&encode(p), common::R_INTERNED);
    }

    #[test]
    fn undefined_interned_arg_value() {
        let mut p = packets();
        let i = p
            .iter()
            .position(|p| {
                p.interned_data
                    .as_ref()
                    .is_some_and(|d| !d.debug_annotation_string_values.is_empty())
            })
            .unwrap();
        p[i].interned_data
            .as_mut()
            .unwrap()
            .debug_annotation_string_values
            .clear();
        expect(&encode(p), common::R_INTERNED);
    }

    #[test]
    fn state_never_cleared() {
        let mut p = packets();
        let i = p
            .iter()
            // An event sequence's first packet (the session marker clears its state too).
            .position(|p| {
                p.sequence_flags.is_some_and(|f| f & 1 != 0)
                    && p.first_packet_on_sequence == Some(true)
            })
            .unwrap();
        p[i].sequence_flags = None;
        p[i].incremental_state_cleared = None;
        expect(&encode(p), common::R_INCREMENTAL);
    }

    #[test]
    fn missing_end() {
        let mut p = packets();
        let i = p
            .iter()
            .position(|p| is_type(p, track_event::Type::SliceEnd))
            .unwrap();
        // Keep the time base: fold the END's delta into the next packet of its sequence.
        let (seq, delta) = (p[i].optional_trusted_packet_sequence_id, p[i].timestamp);
        p.remove(i);
        if let Some(n) = p[i..]
            .iter_mut()
            .find(|q| q.optional_trusted_packet_sequence_id == seq && q.timestamp.is_some())
        {
            n.timestamp = Some(n.timestamp.unwrap() + delta.unwrap());
        }
        expect(&encode(p), common::R_NESTING);
    }

    #[test]
    fn extra_end() {
        let mut p = packets();
        let i = p
            .iter()
            .position(|p| is_type(p, track_event::Type::SliceEnd))
            .unwrap();
        let mut dup = p[i].clone();
        dup.timestamp = Some(0);
        p.insert(i + 1, dup);
        expect(&encode(p), common::R_NESTING);
    }

    #[test]
    fn wrapped_delta() {
        let mut p = packets();
        let i = p
            .iter()
            .rposition(|p| is_type(p, track_event::Type::SliceBegin))
            .unwrap();
        p[i].timestamp = Some((-5i64) as u64);
        expect(&encode(p), common::R_DELTA);
    }

    #[test]
    fn undescribed_track() {
        let mut p = packets();
        // Drop the descriptor of the first track that is some sequence's default track.
        let lane0 = p
            .iter()
            .find_map(|p| {
                p.trace_packet_defaults
                    .as_ref()
                    .and_then(|d| d.track_event_defaults.as_ref())
                    .and_then(|d| d.track_uuid)
            })
            .unwrap();
        p.retain(|p| {
            !matches!(&p.data, Some(trace_packet::Data::TrackDescriptor(d)) if d.uuid == Some(lane0))
        });
        expect(&encode(p), common::R_TRACK);
    }

    #[test]
    fn child_described_before_parent() {
        let mut p = packets();
        let i = p
            .iter()
            .position(|p| matches!(&p.data, Some(trace_packet::Data::TrackDescriptor(d)) if d.thread.is_some()))
            .unwrap();
        let thread = p.remove(i);
        p.push(thread);
        expect(&encode(p), common::R_TRACK);
    }

    #[test]
    fn undefined_clock() {
        let mut p = packets();
        let i = p
            .iter()
            // A sequence's incremental clock (not the trace's REALTIME snapshot).
            .position(|p| match &p.data {
                Some(trace_packet::Data::ClockSnapshot(c)) => {
                    c.clocks.iter().any(|c| c.is_incremental == Some(true))
                }
                _ => false,
            })
            .unwrap();
        p[i].data = None;
        expect(&encode(p), common::R_CLOCK);
    }

    #[test]
    fn truncated_file() {
        let p = packets();
        let bytes = encode(p);
        expect(&bytes[..bytes.len() - 3], common::R_FRAMING);
    }

    /// Indices of two BEGIN packets on different sequences, the first earlier in time.
    fn two_begins(p: &[TracePacket]) -> (usize, usize) {
        let t = validate(&encode(p.to_vec())).unwrap();
        let a = t
            .slices
            .iter()
            .find(|s| !s.instant && &*s.name == "step")
            .unwrap();
        let b = t
            .slices
            .iter()
            .find(|s| !s.instant && s.sequence != a.sequence && s.start > a.start)
            .unwrap();
        (a.packet, b.packet)
    }

    #[allow(deprecated)]
    fn add_flow(p: &mut [TracePacket], i: usize, out: bool, id: u64) {
        let Some(trace_packet::Data::TrackEvent(e)) = &mut p[i].data else {
            panic!("not an event")
        };
        if out {
            e.flow_ids_old.push(id);
        } else {
            e.terminating_flow_ids.push(id);
        }
    }

    #[test]
    fn valid_flow_is_decoded() {
        let mut p = packets();
        let (a, b) = two_begins(&p);
        add_flow(&mut p, a, true, 42);
        add_flow(&mut p, b, false, 42);
        let t = validate(&encode(p)).expect("a forward flow is valid");
        assert_eq!(t.flows.len(), 1);
        let f = t.flows[0];
        assert_eq!(
            (
                f.id,
                t.slices[f.source].packet,
                t.slices[f.destination].packet
            ),
            (42, a, b)
        );
    }

    #[test]
    fn flow_backwards_in_time() {
        let mut p = packets();
        let (a, b) = two_begins(&p);
        add_flow(&mut p, b, true, 42);
        add_flow(&mut p, a, false, 42);
        expect(&encode(p), common::R_FLOW);
    }

    #[test]
    fn flow_without_source() {
        let mut p = packets();
        let (_, b) = two_begins(&p);
        add_flow(&mut p, b, false, 42);
        expect(&encode(p), common::R_FLOW);
    }

    #[test]
    fn flow_with_two_sources() {
        let mut p = packets();
        let (a, b) = two_begins(&p);
        let c = (0..p.len())
            .find(|&j| j != a && j != b && is_type(&p[j], track_event::Type::SliceBegin))
            .unwrap();
        add_flow(&mut p, a, true, 42);
        add_flow(&mut p, c, true, 42);
        add_flow(&mut p, b, false, 42);
        expect(&encode(p), common::R_FLOW);
    }
}
