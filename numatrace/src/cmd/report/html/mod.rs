//! `report --html`: one self-contained page per capture, or per A/B of two captures — inline
//! SVG charts (plotters), inline CSS, one small inline script that sorts the task table, a
//! Content-Security-Policy that lets the page load nothing at all. Every string from a capture
//! is escaped twice: control characters as in the terminal, then for HTML.

mod chart;
mod page;
pub mod timeline;

use std::fmt::Write as _;

pub use page::{Input, ab_page, capture_page};

use crate::text_escape::Escaped;

/// Text for HTML content and attribute values: control characters shown as escapes (as in
/// the terminal), then `&<>"'` as entities.
pub fn esc(s: &str) -> String {
    let shown = Escaped(s).to_string();
    let mut out = String::with_capacity(shown.len());
    for c in shown.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Sorts a table by the clicked column (numbers by their `data-v`, text otherwise).
const SCRIPT: &str = "document.querySelectorAll('table.sortable th').forEach(function(th,i){\
th.addEventListener('click',function(){var t=th.closest('table'),b=t.tBodies[0],\
d=th.dataset.dir==='a'?'d':'a';th.dataset.dir=d;\
var k=function(r){var c=r.cells[i];return c.dataset.v!==undefined?parseFloat(c.dataset.v):c.textContent;};\
Array.from(b.rows).sort(function(x,y){var p=k(x),q=k(y);\
var r=(typeof p==='number'&&typeof q==='number')?p-q:String(p).localeCompare(String(q));\
return d==='a'?r:-r;}).forEach(function(r){b.appendChild(r);});});});";

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;\
padding:0 18px 40px;color:#1b1b1b}h1{font-size:1.5em;margin:18px 0 4px}h2{font-size:1.2em;\
margin:28px 0 8px;border-bottom:1px solid #ccc}figure{margin:14px 0}figcaption{font-weight:600}\
svg{max-width:100%;height:auto}.nm{color:#6a4a00;background:#fff6dc;padding:6px 10px;\
border-left:4px solid #d9a400}.warn{background:#ffe3e3;border-left:4px solid #c00;padding:6px 10px}\
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:2px 7px;\
text-align:right}td.t,th.t{text-align:left}th{background:#f3f3f3}table.sortable th{cursor:pointer}\
.changed td{background:#fff1b8}.v{font-weight:600}.behaves-as-patched{color:#176b17}\
.behaves-as-unpatched{color:#a40000}.meta{color:#555}pre{background:#f7f7f7;padding:8px;\
overflow:auto;font-size:12px}details{margin:6px 0}summary{cursor:pointer}.pair{display:flex;\
gap:16px;flex-wrap:wrap}";

/// The page around `body`: nothing outside the file may load (`default-src 'none'`), the one
/// script is allowed by its hash.
fn document(title: &str, body: &str) -> String {
    use base64::Engine as _;
    let hash = ring::digest::digest(&ring::digest::SHA256, SCRIPT.as_bytes());
    let hash = base64::engine::general_purpose::STANDARD.encode(hash.as_ref());
    let mut s = String::with_capacity(body.len() + 4096);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'sha256-{hash}'\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta name=\"generator\" content=\"numatrace {}\">\n\
         <title>{}</title>\n<style>{STYLE}</style></head>\n<body>\n{body}\n\
         <script>{SCRIPT}</script>\n</body></html>\n",
        env!("CARGO_PKG_VERSION"),
        esc(title),
    );
    s
}

#[cfg(test)]
mod tests;
