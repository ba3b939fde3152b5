//! The recorded timeline drawn as a picture of memory over time (SVG, written by hand): the
//! manager's device bytes stacked by what the storages hold (`Role`), the budget line, loads,
//! prefetches and write-backs as marks under the plot, and where iterations began.
//!
//! Each pixel column shows the fullest moment among the events it covers, so a peak is never
//! lost to the width. The root element carries the figures a test checks the drawing against
//! (`data-budget-bytes`, `data-peak-bytes`, `data-max-bytes`), and each layer's path its role.

use crate::residency::core::report::{EventKind, Timeline};
use crate::residency::core::storage::Role;
use std::fmt::Write as _;

const WIDTH: f64 = 1100.0;
const HEIGHT: f64 = 470.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 880.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 400.0;
/// Bottom to top: what stays longest lies lowest.
const STACK: [(Role, &str); 5] = [
    (Role::Weights, "#4e79a7"),
    (Role::State, "#9c755f"),
    (Role::Gradients, "#59a14f"),
    (Role::Saved, "#edc948"),
    (Role::Activations, "#f28e2b"),
];
const MARKS: [(&str, &str, EventKind); 3] = [
    ("loads", "#4e79a7", EventKind::Load),
    ("prefetches", "#76b7b2", EventKind::Prefetch),
    ("write-backs", "#e15759", EventKind::WriteBack),
];

fn mib(bytes: f64) -> String {
    format!("{:.1} MiB", bytes / (1 << 20) as f64)
}

/// The SVG of `timeline` under `budget` bytes (`u64::MAX`: no budget, Resident).
pub(crate) fn svg(timeline: &Timeline, budget: u64, title: &str) -> String {
    let events = &timeline.events;
    let total = |i: usize| events[i].1 .0.iter().sum::<u64>();
    let peak = (0..events.len()).map(total).max().unwrap_or(0);
    let bounded = budget != u64::MAX;
    let max_bytes = ((if bounded { budget.max(peak) } else { peak }) as f64 * 1.08).max(1.0);
    // From the first thing recorded to the last, in microseconds since the manager started.
    let times = || events.iter().map(|(e, _)| e.time_us).chain(timeline.iterations.iter().copied());
    let start = times().reduce(f64::min).unwrap_or(0.0);
    let end = (times().reduce(f64::max).unwrap_or(0.0) - start).max(1.0);
    let x = |t: f64| LEFT + (RIGHT - LEFT) * (t - start) / end;
    let y = |b: f64| BOTTOM - (BOTTOM - TOP) * b / max_bytes;

    // The fullest event of each pixel column, and the marks each column holds.
    let columns = (RIGHT - LEFT) as usize;
    let column = |t: f64| ((((t - start) / end) * columns as f64) as usize).min(columns - 1);
    let mut fullest: Vec<Option<usize>> = vec![None; columns];
    let mut marked = vec![[false; 3]; columns];
    for (i, (e, _)) in events.iter().enumerate() {
        let c = column(e.time_us);
        if fullest[c].map_or(true, |j| total(i) >= total(j)) {
            fullest[c] = Some(i);
        }
        for (m, (_, _, kind)) in MARKS.iter().enumerate() {
            marked[c][m] |= e.kind == *kind;
        }
    }
    // Each column without an event keeps the state of the last event before it.
    let mut shown = Vec::with_capacity(columns);
    let mut last = None;
    for f in fullest {
        last = f.or(last);
        shown.push(last);
    }

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12" data-budget-bytes="{}" data-peak-bytes="{peak}" data-max-bytes="{max_bytes}" data-plot="{LEFT} {TOP} {RIGHT} {BOTTOM}">"#,
        if bounded { budget.to_string() } else { "none".into() }
    );
    let _ = writeln!(out, r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#);
    let _ = writeln!(out, r#"<text x="{LEFT}" y="24" font-size="15" font-weight="bold">{}</text>"#, escape(title));
    // Axes: bytes on the left, milliseconds below.
    for k in 0..=5 {
        let b = max_bytes * k as f64 / 5.0;
        let _ = writeln!(out, r##"<line x1="{LEFT}" x2="{RIGHT}" y1="{0:.2}" y2="{0:.2}" stroke="#e6e6e6"/><text x="{1}" y="{2:.2}" text-anchor="end">{3}</text>"##, y(b), LEFT - 6.0, y(b) + 4.0, mib(b));
    }
    for k in 0..=5 {
        let t = end * k as f64 / 5.0;
        let _ = writeln!(out, r#"<text x="{:.2}" y="{}" text-anchor="middle">{:.1} ms</text>"#, x(start + t), BOTTOM + 48.0, t / 1e3);
    }
    // The layers, stacked.
    let mut below = vec![0u64; columns];
    for (role, color) in STACK {
        let mut outline: Vec<(f64, u64)> = Vec::with_capacity(4 * columns); // along the top, then back along the bottom
        let mut under = Vec::with_capacity(2 * columns);
        for (c, s) in shown.iter().enumerate() {
            let level = below[c] + s.map_or(0, |i| events[i].1 .0[role as usize]);
            let (x0, x1) = (LEFT + c as f64, LEFT + c as f64 + 1.0);
            outline.extend([(x0, level), (x1, level)]);
            under.extend([(x0, below[c]), (x1, below[c])]);
            below[c] = level;
        }
        outline.extend(under.into_iter().rev());
        let mut d = String::new();
        for (k, (px, level)) in outline.into_iter().enumerate() {
            let _ = write!(d, "{}{px:.1},{:.2} ", if k == 0 { "M" } else { "L" }, y(level as f64));
        }
        let _ = writeln!(out, r#"<path class="layer" data-role="{}" d="{d}Z" fill="{color}" fill-opacity="0.85" stroke="none"/>"#, role.name());
    }
    // Iterations, the budget, the peak.
    for (n, &t) in timeline.iterations.iter().enumerate() {
        let _ = writeln!(out, r##"<line class="iteration" x1="{0:.2}" x2="{0:.2}" y1="{TOP}" y2="{BOTTOM}" stroke="#555" stroke-dasharray="2 3"/><text x="{0:.2}" y="{1}" text-anchor="middle" font-size="10" fill="#555">{2}</text>"##, x(t), TOP - 4.0, n + 1);
    }
    if bounded {
        let _ = writeln!(out, r##"<line class="budget" data-bytes="{budget}" x1="{LEFT}" x2="{RIGHT}" y1="{0:.2}" y2="{0:.2}" stroke="#d62728" stroke-width="1.5" stroke-dasharray="8 4"/><text x="{RIGHT}" y="{1:.2}" text-anchor="end" fill="#d62728">budget {2}</text>"##, y(budget as f64), y(budget as f64) - 5.0, mib(budget as f64));
    }
    let _ = writeln!(out, r#"<text x="{}" y="{}" text-anchor="end">peak {}</text>"#, RIGHT, TOP - 20.0, mib(peak as f64));
    let _ = writeln!(out, r#"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="black"/>"#, RIGHT - LEFT, BOTTOM - TOP);
    // Marks under the plot, one row per kind.
    for (m, (name, color, _)) in MARKS.iter().enumerate() {
        let row = BOTTOM + 8.0 + 9.0 * m as f64;
        let mut d = String::new();
        for (c, marks) in marked.iter().enumerate() {
            if marks[m] {
                let _ = write!(d, "M{:.1},{row} v7 ", LEFT + c as f64 + 0.5);
            }
        }
        let _ = writeln!(out, r#"<path class="marks" data-kind="{name}" d="{d}" stroke="{color}" stroke-width="1"/><text x="{}" y="{}" font-size="10" fill="{color}">{name}</text>"#, RIGHT + 6.0, row + 7.0);
    }
    // The legend.
    for (k, (role, color)) in STACK.iter().rev().enumerate() {
        let ly = TOP + 20.0 * k as f64;
        let _ = writeln!(out, r#"<rect x="{}" y="{ly}" width="14" height="14" fill="{color}"/><text x="{}" y="{}">{}</text>"#, RIGHT + 40.0, RIGHT + 60.0, ly + 11.0, role.name());
    }
    let ly = TOP + 20.0 * STACK.len() as f64;
    let (lx, ty) = (RIGHT + 40.0, ly + 11.0);
    let _ = writeln!(out, r##"<line x1="{0}" x2="{0}" y1="{ly}" y2="{1}" stroke="#555" stroke-dasharray="2 3"/><text x="{2}" y="{ty}">iteration begins</text>"##, lx + 7.0, ly + 14.0, lx + 20.0);
    let _ = writeln!(out, r##"<text x="{}" y="{}" font-size="10" fill="#555">device bytes of the manager, each pixel column its fullest moment</text>"##, LEFT, HEIGHT - 6.0);
    out.push_str("</svg>\n");
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
