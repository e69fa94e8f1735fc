//! The HTTP side of `serve`: `/metrics` (text exposition format) and `/` (a link and the hook
//! table). Anything else is 404; methods other than GET and HEAD are 405. Request bodies are
//! never read.

use std::{fmt::Write as _, time::Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode, header};

use super::Exporter;

pub type Body = Full<Bytes>;

/// A response with a body and its content type.
pub fn response(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(header::CONTENT_TYPE, v);
    }
    r
}

const TEXT: &str = "text/plain; charset=utf-8";

pub async fn handle<B>(exporter: &Exporter, req: &Request<B>) -> Response<Body> {
    let page = match req.uri().path() {
        "/metrics" => Page::Metrics,
        "/" => Page::Index,
        _ => return response(StatusCode::NOT_FOUND, TEXT, ""),
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = response(StatusCode::METHOD_NOT_ALLOWED, TEXT, "");
        r.headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET,HEAD"));
        return r;
    }
    match page {
        Page::Metrics => metrics(exporter).await,
        Page::Index => response(StatusCode::OK, "text/html; charset=utf-8", index(exporter)),
    }
}

enum Page {
    Metrics,
    Index,
}

async fn metrics(exporter: &Exporter) -> Response<Body> {
    match exporter.scrape(Instant::now()).await {
        // text/plain; version=0.0.4
        Ok(body) => response(
            StatusCode::OK,
            prometheus::TEXT_FORMAT,
            body.as_str().to_owned(),
        ),
        Err(e) => {
            tracing::warn!("scrape failed: {e:#}");
            response(
                StatusCode::INTERNAL_SERVER_ERROR,
                TEXT,
                format!("numatrace: {e:#}\n"),
            )
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn index(exporter: &Exporter) -> String {
    let mut rows = String::new();
    for h in &exporter.hooks {
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&h.name),
            if h.attached {
                h.mechanism.to_string()
            } else {
                "none".to_owned()
            },
            if h.attached { "yes" } else { "no" },
            escape(&h.reasons.join("; ")),
        );
    }
    format!(
        "<!doctype html><html><head><title>numatrace</title></head><body>\
         <h1>numatrace {}</h1><p><a href=\"/metrics\">/metrics</a></p>\
         <h2>Hooks on this kernel</h2><table border=\"1\">\
         <tr><th>hook</th><th>mechanism</th><th>attached</th><th>why not / notes</th></tr>\
         {rows}</table></body></html>\n",
        env!("CARGO_PKG_VERSION")
    )
}
