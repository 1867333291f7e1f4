//! Every failure class of the training fetcher against a canned HTTP server: HTTP 500 with
//! Prometheus's error JSON, a hang past the timeout, a non-JSON body, `"status":"error"`, a
//! wrong result type, NaN/Inf values and an empty result. Each checks the classified error and
//! what reaches the store (never a bad value, always a status row). Then secrets: a token from
//! a file never shows in an error's Display or Debug (env secrets: `training_env_secret.rs`).

use std::time::{Duration, Instant};

use gpuwatch::config::{PrometheusAuth, QueryMethod, SecretSource};
use gpuwatch::model::TrainingWrite;
use gpuwatch::store::read;
use gpuwatch::training::{FetchError, Role, TrainingFetcher};

use crate::training_support::{Canned, CannedServer, HOST, config, count, open_store};

const T: i64 = 1_750_000_000_000;
const PROM_500: &str =
    r#"{"status":"error","errorType":"internal","error":"opening storage failed: disk I/O"}"#;
const QUERY_ERROR: &str =
    r#"{"status":"error","errorType":"bad_data","error":"1:14: parse error: unexpected <by>"}"#;
const VECTOR: &str = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
const EMPTY: &str = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
const NON_FINITE: &str = r#"{"status":"success","data":{"resultType":"matrix","result":[
  {"metric":{"__name__":"training_loss","gpu":"0"},
   "values":[[1750000000,"NaN"],[1750000015,"+Inf"],[1750000030,"-Inf"],[1750000045,"0.5"]]},
  {"metric":{"__name__":"training_loss","gpu":"1"},"values":[[1750000000,"NaN"]]}]}}"#;

async fn fetch_err(server: &CannedServer) -> FetchError {
    let f = TrainingFetcher::new(&config(&server.url), HOST).expect("fetcher");
    f.fetch_role(Role::Step, T - 60_000, T)
        .await
        .expect_err("must fail")
}

/// Polls once at `T`, writes the result into a fresh store, returns (write, points stored).
async fn poll_into_store(url: &str) -> (TrainingWrite, i64, Vec<read::TrainingSourceRow>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut st = open_store(dir.path());
    let mut f = TrainingFetcher::new(&config(url), HOST).expect("fetcher");
    let w = f.poll(T).await;
    st.write_training(&w).expect("write");
    let n = count(st.conn(), "SELECT count(*) FROM training_samples");
    let rows = read::training_sources(st.conn(), Some(HOST)).expect("status");
    (w, n, rows)
}

#[tokio::test]
async fn http_500_carries_prometheus_error_json() {
    let s = CannedServer::start(vec![Canned::Json(500, PROM_500)]);
    let e = fetch_err(&s).await;
    assert_eq!(
        e,
        FetchError::Http {
            status: 500,
            error_type: Some("internal".into()),
            error: Some("opening storage failed: disk I/O".into()),
            detail: None,
        }
    );
    assert!(e.is_outage());
    let (w, stored, rows) = poll_into_store(&s.url).await;
    assert!(w.points.is_empty());
    assert_eq!(stored, 0);
    assert_eq!(rows.len(), 2);
    for r in rows {
        assert_eq!(r.last_error_kind.as_deref(), Some("http_5xx"));
        assert_eq!(r.last_error.as_deref(), Some(e.to_string().as_str()));
        assert_eq!((r.last_success_ms, r.last_nonempty_ms), (None, None));
        assert_eq!(r.consecutive_failures, 1);
    }
}

#[tokio::test]
async fn a_hang_is_a_timeout_after_the_deadline() {
    let s = CannedServer::start(vec![Canned::Hang]);
    let mut cfg = config(&s.url);
    cfg.timeout = Duration::from_millis(300);
    let f = TrainingFetcher::new(&cfg, HOST).expect("fetcher");
    let start = Instant::now();
    let e = f
        .fetch_role(Role::Step, T - 60_000, T)
        .await
        .expect_err("times out");
    let took = start.elapsed();
    assert_eq!(e.kind(), "timeout", "{e}");
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert_eq!(
        e.to_string(),
        format!("Prometheus at {} did not answer within 300ms", s.url)
    );
}

#[tokio::test]
async fn non_json_body_is_classified_with_an_excerpt() {
    let s = CannedServer::start(vec![Canned::Raw(
        200,
        "text/html",
        "<html><body>Sign in</body></html>",
    )]);
    let e = fetch_err(&s).await;
    assert_eq!(e.kind(), "not_json");
    assert!(e.to_string().contains("<html><body>Sign in"), "{e}");
    let s = CannedServer::start(vec![Canned::Raw(
        502,
        "text/html",
        "<h1>502 Bad Gateway</h1>",
    )]);
    let e = fetch_err(&s).await;
    assert_eq!(
        e.to_string(),
        "Prometheus answered HTTP 502: <h1>502 Bad Gateway</h1>"
    );
}

#[tokio::test]
async fn status_error_and_wrong_result_type() {
    let s = CannedServer::start(vec![Canned::Json(200, QUERY_ERROR)]);
    let e = fetch_err(&s).await;
    assert_eq!(
        e,
        FetchError::QueryFailed {
            error_type: "bad_data".into(),
            error: "1:14: parse error: unexpected <by>".into()
        }
    );
    assert!(!e.is_outage(), "a bad query is not an outage");
    let (_, stored, rows) = poll_into_store(&s.url).await;
    assert_eq!(stored, 0);
    assert!(
        rows.iter()
            .all(|r| r.last_error_kind.as_deref() == Some("query_error"))
    );

    let s = CannedServer::start(vec![Canned::Json(200, VECTOR)]);
    assert_eq!(
        fetch_err(&s).await,
        FetchError::WrongResultType {
            got: "vector".into()
        }
    );
}

#[tokio::test]
async fn nan_and_inf_are_skipped_counted_and_never_stored() {
    let s = CannedServer::start(vec![Canned::Json(200, NON_FINITE)]);
    let (w, stored, rows) = poll_into_store(&s.url).await;
    // Both roles got the canned answer: one finite point each.
    assert_eq!(w.points.len(), 2);
    assert!(
        w.points
            .iter()
            .all(|p| p.value == 0.5 && p.ts_ms == 1_750_000_045_000)
    );
    assert_eq!(stored, 2);
    for r in rows {
        assert_eq!((r.consecutive_failures, r.last_error_kind), (0, None));
        assert_eq!((r.last_series, r.skipped_non_finite), (Some(2), 4));
        assert_eq!(r.last_nonempty_ms, Some(T));
        assert_eq!(r.last_point_ms, Some(1_750_000_045_000));
    }
}

#[tokio::test]
async fn empty_result_is_no_data_not_an_error() {
    let s = CannedServer::start(vec![Canned::Json(200, EMPTY)]);
    let (w, stored, rows) = poll_into_store(&s.url).await;
    assert!(w.points.is_empty());
    assert_eq!(stored, 0);
    for r in rows {
        assert_eq!(
            (r.last_success_ms, r.last_error_ms, r.consecutive_failures),
            (Some(T), None, 0)
        );
        assert_eq!(r.last_series, Some(0));
        assert_eq!(r.last_nonempty_ms, None, "never had training metrics");
    }
}

#[tokio::test]
async fn requests_carry_the_range_aligned_to_the_step_and_post_works() {
    let s = CannedServer::start(vec![Canned::Json(200, EMPTY)]);
    let mut cfg = config(&s.url);
    cfg.method = QueryMethod::Post;
    cfg.queries.step = r#"my_step{node="$host"}"#.into();
    let f = TrainingFetcher::new(&cfg, "node-\"1\"").expect("fetcher");
    f.fetch_role(Role::Step, T + 7_000, T + 61_000)
        .await
        .expect("empty is ok");
    let req = s.requests().pop().expect("one request");
    assert!(
        req.starts_with("POST /api/v1/query_range HTTP/1.1"),
        "{req}"
    );
    let body = req.rsplit("\r\n").next().unwrap_or("");
    let form: Vec<(String, String)> = url_decode(body);
    let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("query"), Some(r#"my_step{node="node-\"1\""}"#));
    assert_eq!(get("start"), Some("1750000005"));
    assert_eq!(
        get("end"),
        Some("1750000050"),
        "aligned down to the 15 s grid"
    );
    assert_eq!(get("step"), Some("15"));
}

fn url_decode(body: &str) -> Vec<(String, String)> {
    let dec = |s: &str| {
        let s = s.replace('+', " ");
        let mut out = Vec::new();
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b'%' && i + 2 < b.len() {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 3;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    body.split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (dec(k), dec(v)))
        .collect()
}

const TOKEN: &str = "tok-9f8e7d6c5b4a-SECRET";

#[tokio::test]
async fn a_bearer_token_from_a_file_never_appears_in_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("write token");
    // A leaky server that echoes the request (with its Authorization header) in a 401.
    let s = CannedServer::start(vec![Canned::Echo(401), Canned::Echo(200)]);
    let mut cfg = config(&s.url);
    cfg.auth = PrometheusAuth::Bearer(SecretSource::File(token_file.clone()));
    let f = TrainingFetcher::new(&cfg, HOST).expect("fetcher");
    for kind in ["http_4xx", "not_json"] {
        let e = f
            .fetch_role(Role::Step, T - 60_000, T)
            .await
            .expect_err("fails");
        assert_eq!(e.kind(), kind, "{e}");
        let (shown, debug) = (e.to_string(), format!("{e:?}"));
        assert!(
            shown.contains("authorization: Bearer ***"),
            "the echo is scrubbed: {shown}"
        );
        assert!(
            !shown.contains(TOKEN) && !debug.contains(TOKEN),
            "{shown}\n{debug}"
        );
    }
    assert!(s.requests()[0].contains(&format!("authorization: Bearer {TOKEN}\r\n")));
    // Unreachable, with the token set: no token either; and a missing file names the file only.
    let mut cfg = config("http://127.0.0.1:9");
    cfg.auth = PrometheusAuth::Bearer(SecretSource::File(token_file.clone()));
    let e = TrainingFetcher::new(&cfg, HOST)
        .expect("fetcher")
        .fetch_range(T - 1000, T)
        .await;
    let e = e.expect_err("unreachable");
    assert_eq!(e.kind(), "unreachable", "{e}");
    assert!(!e.to_string().contains(TOKEN) && !format!("{e:?}").contains(TOKEN));
    std::fs::remove_file(&token_file).expect("rm");
    let f = TrainingFetcher::new(&cfg, HOST).expect("fetcher");
    let e = f.fetch_range(T - 1000, T).await.expect_err("no token");
    assert_eq!(e.kind(), "secret");
    assert!(e.to_string().starts_with(&format!(
        "cannot read the bearer token from file {}",
        token_file.display()
    )));
}
