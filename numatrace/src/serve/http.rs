//! The HTTP side of `serve`: `/metrics` (text exposition format) and `/` (a link and the hook
//! table). Anything else is 404; methods other than GET and HEAD are 405.

use std::{fmt::Write as _, sync::Arc, time::Instant};

use axum::{
    Router,
    extract::State,
    http::{StatusCode, header},
    response::{Html, IntoResponse, Response},
    routing::get,
};

use super::Exporter;

pub fn router(exporter: Arc<Exporter>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/", get(index))
        .with_state(exporter)
}

async fn metrics(State(exporter): State<Arc<Exporter>>) -> Response {
    match exporter.scrape(Instant::now()).await {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                prometheus::TEXT_FORMAT, // text/plain; version=0.0.4
            )],
            body.as_str().to_owned(),
        )
            .into_response(),
        Err(e) => {
            tracing::warn!("scrape failed: {e:#}");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("numatrace: {e:#}\n"),
            )
                .into_response()
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

async fn index(State(exporter): State<Arc<Exporter>>) -> Html<String> {
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
    Html(format!(
        "<!doctype html><html><head><title>numatrace</title></head><body>\
         <h1>numatrace {}</h1><p><a href=\"/metrics\">/metrics</a></p>\
         <h2>Hooks on this kernel</h2><table border=\"1\">\
         <tr><th>hook</th><th>mechanism</th><th>attached</th><th>why not / notes</th></tr>\
         {rows}</table></body></html>\n",
        env!("CARGO_PKG_VERSION")
    ))
}
