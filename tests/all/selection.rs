//! Selection (`--types`, `--nvtx-filter`, `--time-range`, `--pid`, `--device`), the NVTX colour
//! scheme and NVTX projected onto the GPU: what is written matches SQL on the source, and flows
//! and lanes stay valid (every output goes through the validator).

use crate::common;

use crate::common::{Trace, corpus_dir, fixture, validate_file};
use nsys_perfetto::convert::Options;
use nsys_perfetto_model::category::EventType;
use nsys_perfetto_model::select::{NameFilter, Selection, parse_color_scheme};
use rusqlite::{Connection, OpenFlags};
use std::collections::BTreeSet;
use std::path::Path;

fn run(input: &Path, selection: Selection) -> (nsys_perfetto_model::summary::Summary, Trace) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pftrace");
    let opts = Options {
        selection,
        ..Options::default()
    };
    let summary = crate::common::convert_to(input, &out, &opts);
    let trace = validate_file(&out);
    (summary, trace)
}

fn count(input: &Path, sql: &str) -> usize {
    let conn = Connection::open_with_flags(input, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap() as usize
}

fn of_category<'a>(t: &'a Trace, cat: &str) -> Vec<&'a common::Slice> {
    t.slices.iter().filter(|s| &*s.category == cat).collect()
}

fn two_gpu_export() -> Option<std::path::PathBuf> {
    let p = corpus_dir()?.join("GindaChen__nsys-ai__h100_2gpu_1s.sqlite");
    p.is_file().then_some(p)
}

fn types(list: &[EventType]) -> Selection {
    Selection {
        types: list.iter().copied().collect(),
        ..Selection::default()
    }
}

#[test]
fn types_keep_only_what_was_asked_and_flows_only_between_kept_slices() {
    let Some(input) = two_gpu_export() else {
        common::skip("corpus", "../shared/corpus not found");
        return;
    };
    let (_, t) = run(&input, types(&[EventType::Kernel, EventType::Nvtx]));
    assert_eq!(
        EventType::parse_list(&["all"]).unwrap().len(),
        EventType::ALL.len()
    );
    // NVTX on the GPU is part of the default, as on Nsight Systems' timeline; `-TYPE` leaves a
    // type out of the defaults.
    assert!(Selection::default().wants(EventType::NvtxGpu));
    let without = EventType::parse_list(&["-nvtx-gpu", "-cpu-samples"]).unwrap();
    assert_eq!(without.len(), EventType::ALL.len() - 2);
    assert!(!without.contains(&EventType::NvtxGpu) && !without.contains(&EventType::CpuSamples));
    assert_eq!(
        EventType::parse_list(&["kernel", "nvtx", "-nvtx"]).unwrap(),
        BTreeSet::from([EventType::Kernel])
    );
    assert!(EventType::parse_list(&["-bogus"]).is_err());
    let cats: BTreeSet<&str> = t.slices.iter().map(|s| &*s.category).collect();
    assert_eq!(cats, BTreeSet::from(["cuda.kernel", "nvtx"]));
    assert!(t.flows.is_empty(), "no API calls written, so no arrows");

    let (summary, t) = run(&input, types(&[EventType::CudaApi, EventType::Memcpy]));
    let memcpys = of_category(&t, "cuda.memcpy");
    assert_eq!(
        memcpys.len(),
        count(&input, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")
    );
    let linked = count(
        &input,
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN CUPTI_ACTIVITY_KIND_RUNTIME r \
         ON r.correlationId = m.correlationId AND r.globalTid >> 24 = m.globalPid >> 24 \
         WHERE m.start > r.start",
    );
    assert!(linked > 0);
    assert_eq!(t.flows.len(), linked);
    assert_eq!(summary.flows as usize, linked);
    for f in &t.flows {
        assert_eq!(&*t.slices[f.source].category, "cuda.api");
        assert_eq!(&*t.slices[f.destination].category, "cuda.memcpy");
    }
}

#[test]
fn time_pid_and_device_filters_match_sql() {
    let Some(input) = two_gpu_export() else {
        common::skip("corpus", "../shared/corpus not found");
        return;
    };
    let (lo, hi) = (155_500_000_000i64, 155_900_000_000i64);
    let sel = Selection {
        time: Some(format!("{lo}ns..{hi}ns").parse().unwrap()),
        ..Selection::default()
    };
    let (_, t) = run(&input, sel);
    for s in &t.slices {
        assert!(
            s.end >= lo && s.start <= hi,
            "{} outside the window",
            s.name
        );
    }
    let overlap = |table: &str| {
        count(
            &input,
            &format!("SELECT count(*) FROM {table} WHERE \"end\" >= {lo} AND start <= {hi}"),
        )
    };
    assert_eq!(
        of_category(&t, "cuda.kernel").len(),
        overlap("CUPTI_ACTIVITY_KIND_KERNEL")
    );
    assert_eq!(
        of_category(&t, "cuda.api").len(),
        overlap("CUPTI_ACTIVITY_KIND_RUNTIME")
    );
    assert_eq!(
        of_category(&t, "nvtx").len(),
        count(
            &input,
            &format!(
                "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND \"end\" >= {lo} AND start <= {hi}"
            )
        )
    );

    let sel = Selection {
        pids: vec![111],
        ..Selection::default()
    };
    let (_, t) = run(&input, sel);
    assert_eq!(
        of_category(&t, "cuda.kernel").len(),
        count(
            &input,
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE (globalPid >> 24) & 16777215 = 111"
        )
    );
    for tr in t.tracks.values() {
        if let Some(th) = &tr.thread {
            assert_eq!(th.pid, 111);
        }
    }

    let sel = Selection {
        devices: vec![1],
        ..Selection::default()
    };
    let (_, t) = run(&input, sel);
    let kernels = of_category(&t, "cuda.kernel");
    assert_eq!(
        kernels.len(),
        count(
            &input,
            "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 1"
        )
    );
    assert!(kernels.iter().all(|k| k.arg_int("device") == Some(1)));
    assert!(!t.flows.is_empty());
    for f in &t.flows {
        assert_eq!(t.slices[f.destination].arg_int("device"), Some(1));
    }
}

#[test]
fn nvtx_filter_by_prefix_and_regex_includes_registered_names() {
    let Some(dir) = corpus_dir() else {
        common::skip("corpus", "../shared/corpus not found");
        return;
    };
    // cuDF names most of its ranges with registered strings (textId).
    let input = dir.join("quasiben__nvtx-examples__cudf.sqlite");
    let names_sql = "SELECT coalesce(n.text, s.value) FROM NVTX_EVENTS n LEFT JOIN StringIds s \
                     ON s.id = n.textId WHERE n.eventType = 59";
    let conn = Connection::open_with_flags(&input, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let names: Vec<String> = conn
        .prepare(names_sql)
        .unwrap()
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for filter in ["sort", "re:^(GROUPBY|SORT)_"] {
        let f = NameFilter::parse(filter).unwrap();
        let expected = names.iter().filter(|n| f.matches(n)).count();
        assert!(expected > 0, "{filter} matches something in the source");
        let sel = Selection {
            nvtx_filter: Some(f.clone()),
            ..Selection::default()
        };
        let (_, t) = run(&input, sel);
        let nvtx = of_category(&t, "nvtx");
        assert_eq!(nvtx.len(), expected, "{filter}");
        assert!(nvtx.iter().all(|s| f.matches(&s.name)));
        // Other kinds are untouched by an NVTX filter.
        assert_eq!(
            of_category(&t, "cuda.kernel").len(),
            count(&input, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")
        );
    }
}

#[test]
fn color_scheme_overrides_nvtx_colours_by_name() {
    let input = fixture("nvtx_workload.sqlite");
    let sel = Selection {
        nvtx_colors: parse_color_scheme(r##"{"^forw": "#ff0000", "ward$": "blue"}"##).unwrap(),
        ..Selection::default()
    };
    let (_, t) = run(&input, sel);
    let (_, plain) = run(&input, Selection::default());
    let colour = |t: &Trace, name: &str| -> BTreeSet<String> {
        t.slices
            .iter()
            .filter(|s| &*s.name == name)
            .map(|s| s.arg_str("color").unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(
        colour(&t, "forward"),
        BTreeSet::from(["#ff0000".to_string()])
    );
    // First match wins: "backward" ends in "ward" but does not start with "forw".
    assert_eq!(
        colour(&t, "backward"),
        BTreeSet::from(["#0000ff".to_string()])
    );
    assert_eq!(colour(&t, "step"), colour(&plain, "step"));
    assert_ne!(colour(&plain, "forward"), colour(&t, "forward"));
}

#[test]
fn nvtx_ranges_projected_onto_the_gpu_nest_and_kernels_list_their_ranges() {
    let Some(dir) = corpus_dir() else {
        common::skip("corpus", "../shared/corpus not found");
        return;
    };
    let input = dir.join("quasiben__nvtx-examples__cudf.sqlite");
    let mut sel = Selection::default();
    sel.types.insert(EventType::NvtxGpu);
    let (summary, t) = run(&input, sel);
    let projected = of_category(&t, "nvtx.gpu");
    assert!(!projected.is_empty());
    assert_eq!(
        projected.len() as u64,
        summary.events_of(nsys_perfetto_model::category::Category::NvtxGpu)
    );
    // Each projected slice spans exactly the GPU work launched inside its CPU range: its start
    // is some kernel's/memcpy's start and its end some GPU row's end on that device.
    let gpu: Vec<_> = t
        .slices
        .iter()
        .filter(|s| s.category.starts_with("cuda.") && &*s.category != "cuda.api")
        .collect();
    for p in &projected {
        assert!(gpu.iter().any(|g| g.start == p.start), "{} start", p.name);
        assert!(gpu.iter().any(|g| g.end == p.end), "{} end", p.name);
        assert!(p.arg_int("gpu_rows").unwrap() >= 1);
    }
    // A hand-checked kernel: launched inside GROUPBY_AGG > SORT_INDEX > sorted_order.
    assert!(
        of_category(&t, "cuda.kernel")
            .iter()
            .any(|k| k.arg_str("nvtx_ranges") == Some("GROUPBY_AGG > SORT_INDEX > sorted_order"))
    );
    // Projected ranges nest like the CPU ones: some have depth > 0.
    assert!(projected.iter().any(|p| p.depth > 0));
    // By default the same projection is written; left out with `-nvtx-gpu`, neither the tracks
    // nor the kernel arg appear.
    let (_, d) = run(&input, Selection::default());
    assert_eq!(of_category(&d, "nvtx.gpu").len(), projected.len());
    let sel = Selection {
        types: EventType::parse_list(&["-nvtx-gpu"]).unwrap(),
        ..Selection::default()
    };
    let (_, t) = run(&input, sel);
    assert!(of_category(&t, "nvtx.gpu").is_empty());
    assert!(t.slices.iter().all(|s| s.arg("nvtx_ranges").is_none()));
}
