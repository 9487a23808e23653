//! The findings of `analyze` in a converted trace: each one blamed on the event it names, with a
//! flow from the finding to the event.

use super::analyze::analyze;
use super::{CSV_COLUMNS, Finding, Options, Outcome, RULES, Rule, Value};
use crate::schema::Schema;
use anyhow::Result;

/// The findings a conversion draws: every rule with nsys' defaults, each finding with the flow
/// id that links it to the CUDA call it blames.
#[derive(Debug, Default)]
pub struct TraceFindings {
    items: Vec<(Rule, Finding, Option<u64>)>,
    /// (thread, start) of each blamed call -> the flow ids it starts.
    blamed: std::collections::HashMap<(i64, i64), Vec<u64>, nsys_perfetto_model::model::FastHash>,
    /// The flow ids whose call was written (a selection may leave the call out).
    written: std::sync::Mutex<std::collections::HashSet<u64>>,
}

impl TraceFindings {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Flow ids of findings: `n << 2 | 3`, beside the GPU rows' (`rowid << 2 | table`, tables 0 to
/// 2, see [`crate::flows::flow_id`]), so the two never meet.
fn finding_flow(n: u64) -> u64 {
    n << 2 | 3
}

/// Run every rule (nsys' defaults) on a conversion's export.
pub fn for_trace(schema: &Schema) -> Result<TraceFindings> {
    let conn = crate::connection::open_readonly(&schema.path)?;
    let reports = analyze(&conn, schema, &Options::default())?;
    let mut out = TraceFindings::default();
    let mut n = 0;
    for r in reports {
        let Outcome::Findings(findings) = r.outcome else {
            continue;
        };
        for f in findings {
            // An arrow from the call to the GPU work it waited for. A synchronizing call's
            // finding is the call itself, at the same time: its args name the call instead.
            let linked = f
                .blame
                .as_ref()
                .filter(|b| r.rule.on_gpu() && f.start > b.start);
            let flow = linked.map(|b| {
                n += 1;
                let id = finding_flow(n);
                out.blamed
                    .entry((b.global_tid, b.start))
                    .or_default()
                    .push(id);
                id
            });
            out.items.push((r.rule, f, flow));
        }
    }
    Ok(out)
}

/// A filter that adds, to each CUDA call a finding blames, the arrow to the finding.
pub struct Blamed<'a> {
    pub findings: &'a TraceFindings,
    pub scratch: Vec<u64>,
}

impl<S: nsys_perfetto_model::model::EventSink> nsys_perfetto_model::model::SinkFilter<S>
    for Blamed<'_>
{
    fn event(
        &mut self,
        sink: &mut S,
        key: nsys_perfetto_model::model::GroupKey,
        ev: &nsys_perfetto_model::model::Event<'_>,
    ) -> Result<()> {
        if !self.findings.blamed.is_empty()
            && ev.category == nsys_perfetto_model::category::Category::CudaApi
            && let nsys_perfetto_model::model::GroupKey::ThreadApi { global_tid } = key
            && let Some(ids) = self.findings.blamed.get(&(global_tid, ev.start))
        {
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            scratch.extend_from_slice(ev.flows.out);
            scratch.extend_from_slice(ids);
            if let Ok(mut w) = self.findings.written.lock() {
                w.extend(ids.iter().copied());
            }
            let linked = nsys_perfetto_model::model::Event {
                flows: nsys_perfetto_model::model::Flows {
                    out: &scratch,
                    terminating: ev.flows.terminating,
                },
                ..ev.clone()
            };
            let result = sink.event(key, &linked);
            self.scratch = scratch;
            return result;
        }
        sink.event(key, ev)
    }
}

/// Write the findings into `sink` (after every reader, so the calls they blame are known): one
/// slice per finding on its rule's track of the "Analysis" group, named by the rule, with the
/// rule's explanation, nsys' advice and the finding's columns as args, and an arrow from the
/// call it blames when that call was written. A selection keeps the findings that overlap its
/// time window and belong to its processes and devices.
pub fn write_findings<S: nsys_perfetto_model::model::EventSink>(
    findings: &TraceFindings,
    selection: &nsys_perfetto_model::select::Selection,
    mut sink: S,
) -> Result<nsys_perfetto_model::summary::Summary> {
    use nsys_perfetto_model::category::Category;
    use nsys_perfetto_model::model::{Arg, ArgValue, Event, Flows, GroupKey, Name};
    let written = findings
        .written
        .lock()
        .map(|w| w.clone())
        .unwrap_or_default();
    let opts = Options::default();
    let mut order: Vec<&(Rule, Finding, Option<u64>)> = findings.items.iter().collect();
    order.sort_by_key(|(r, f, _)| (*r, f.start, std::cmp::Reverse(f.duration)));
    let int = |f: &Finding, rule: Rule, col: &str| match f.value(rule, col) {
        Some(Value::Int(v)) => Some(*v),
        _ => None,
    };
    for (rule, f, flow) in order {
        let (rule, end) = (*rule, f.start.saturating_add(f.duration));
        if let Some(t) = selection.time
            && (t.start.is_some_and(|s| end < s) || t.end.is_some_and(|e| f.start > e))
        {
            continue;
        }
        if !selection.pids.is_empty()
            && !int(f, rule, "PID").is_some_and(|p| selection.pids.contains(&p))
        {
            continue;
        }
        if !selection.devices.is_empty()
            && let Some(d) = int(f, rule, "Device ID")
            && !selection.devices.contains(&d)
        {
            continue;
        }
        let advice = rule.advice(&opts);
        let texts: Vec<String> = f.values.iter().map(Value::text).collect();
        let mut args: Vec<Arg<'_>> = vec![
            Arg::str("rule", rule.name()),
            Arg::str("title", rule.title()),
            Arg::str("explanation", rule.explanation()),
            Arg::str("advice", &advice),
        ];
        for (i, v) in f.values.iter().enumerate() {
            let Some((key, _)) = CSV_COLUMNS
                .iter()
                .find(|(_, nsys)| *nsys == rule.columns()[i])
            else {
                continue;
            };
            match v {
                Value::Null => {}
                Value::Int(x) => args.push(Arg::int(key, *x)),
                Value::Real(x) => args.push(Arg {
                    key,
                    value: ArgValue::Double(*x),
                }),
                Value::Text(_) => args.push(Arg::str(key, &texts[i])),
            }
        }
        if let Some(b) = &f.blame {
            args.push(Arg::int(
                "blamed_call_tid",
                nsys_perfetto_model::model::tid_of(b.global_tid),
            ));
            args.push(Arg::int("blamed_call_start_ns", b.start));
            if let Some(c) = b.correlation_id {
                args.push(Arg::int("correlation_id", c));
            }
        }
        let ev = Event {
            start: f.start,
            end: Some(end),
            name: Name::Static(rule.name()),
            category: Category::Analysis,
            args: &args,
            flows: Flows {
                out: &[],
                terminating: flow.filter(|id| written.contains(id)),
            },
        };
        let index = RULES.iter().position(|r| *r == rule).unwrap_or(0) as u8;
        sink.event(
            GroupKey::Analysis {
                rule: index,
                track: rule.track_name(),
                source: 0,
            },
            &ev,
        )?;
    }
    sink.finish()
}
