//! Rows later than their group's written time, held until they are written on the group of late
//! rows: an event's owned copy.

use nsys_perfetto_model::category::Category;
use nsys_perfetto_model::model::{Arg, ArgValue, Event, Flows, GroupKey, Name, TextNo};

/// A row held for a later group: the event with what it borrowed copied.
pub(super) struct LateRow {
    pub(super) key: GroupKey,
    pub(super) start: i64,
    pub(super) end: Option<i64>,
    pub(super) name: LateName,
    pub(super) category: Category,
    pub(super) args: Vec<(&'static str, LateValue)>,
    pub(super) flows_out: Vec<u64>,
    pub(super) terminating: Option<u64>,
}

pub(super) enum LateName {
    Str(i64),
    Text(Box<str>),
    Static(&'static str),
    Numbered(TextNo, Box<str>),
}

pub(super) enum LateValue {
    Int(i64),
    Double(f64),
    Bool(bool),
    Str(Box<str>),
    Label(Box<str>),
    StrId(i64),
    Numbered(TextNo, Box<str>),
}

impl LateRow {
    pub(super) fn new(key: GroupKey, ev: &Event<'_>) -> LateRow {
        LateRow {
            key,
            start: ev.start,
            end: ev.end,
            name: match ev.name {
                Name::Str(id) => LateName::Str(id),
                Name::Text(t) => LateName::Text(t.into()),
                Name::Static(t) => LateName::Static(t),
                Name::Numbered(no, t) => LateName::Numbered(no, t.into()),
            },
            category: ev.category,
            args: ev
                .args
                .iter()
                .map(|a| {
                    let v = match a.value {
                        ArgValue::Int(v) => LateValue::Int(v),
                        ArgValue::Double(v) => LateValue::Double(v),
                        ArgValue::Bool(v) => LateValue::Bool(v),
                        ArgValue::Str(v) => LateValue::Str(v.into()),
                        ArgValue::Label(v) => LateValue::Label(v.into()),
                        ArgValue::StrId(v) => LateValue::StrId(v),
                        ArgValue::Numbered(no, v) => LateValue::Numbered(no, v.into()),
                    };
                    (a.key, v)
                })
                .collect(),
            flows_out: ev.flows.out.to_vec(),
            terminating: ev.flows.terminating,
        }
    }

    /// The event again; `args` is scratch space for its argument list.
    pub(super) fn event<'a>(&'a self, args: &'a mut Vec<Arg<'a>>) -> Event<'a> {
        args.clear();
        args.extend(self.args.iter().map(|(key, v)| Arg {
            key,
            value: match v {
                LateValue::Int(v) => ArgValue::Int(*v),
                LateValue::Double(v) => ArgValue::Double(*v),
                LateValue::Bool(v) => ArgValue::Bool(*v),
                LateValue::Str(v) => ArgValue::Str(v),
                LateValue::Label(v) => ArgValue::Label(v),
                LateValue::StrId(v) => ArgValue::StrId(*v),
                LateValue::Numbered(no, v) => ArgValue::Numbered(*no, v),
            },
        }));
        Event {
            start: self.start,
            end: self.end,
            name: match &self.name {
                LateName::Str(id) => Name::Str(*id),
                LateName::Text(t) => Name::Text(t),
                LateName::Static(t) => Name::Static(t),
                LateName::Numbered(no, t) => Name::Numbered(*no, t),
            },
            category: self.category,
            args: args.as_slice(),
            flows: Flows {
                out: &self.flows_out,
                terminating: self.terminating,
            },
        }
    }
}
