//! Parsing the answer of `/api/v1/query_range` into series of finite points.
//!
//! Invariants:
//! - Classification order: HTTP status first (a non-2xx answer is [`FetchError::Http`] even
//!   when its body is Prometheus JSON, whose `errorType`/`error` it carries), then JSON, then
//!   `status`, then `resultType`, then the values.
//! - NaN, +Inf and -Inf (Prometheus sends them as the strings `"NaN"`, `"+Inf"`, `"-Inf"`) are
//!   "no data": skipped and counted in [`Matrix::skipped_non_finite`], never returned.
//! - Labels come back sorted, without `__name__`; timestamps are rounded to milliseconds.
//! - An empty `result` is a valid, empty [`Matrix`].

use serde::Deserialize;

use super::error::{FetchError, excerpt};
use crate::model::TsMs;

/// One series of a range query.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Sorted `(label, value)` pairs, without `__name__`.
    pub labels: Vec<(String, String)>,
    /// The metric name, when the query kept it (for logs).
    pub metric_name: Option<String>,
    /// Finite points in time order.
    pub points: Vec<(TsMs, f64)>,
}

/// A parsed `matrix` result.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Matrix {
    pub series: Vec<Series>,
    /// NaN / ±Inf values skipped.
    pub skipped_non_finite: u64,
    /// Prometheus's `warnings`, if any.
    pub warnings: Vec<String>,
}

#[derive(Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct RawSeries {
    metric: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<(f64, String)>,
}

/// Classifies and parses an answer. `status` is the HTTP status code.
pub fn parse_query_range(status: u16, body: &[u8]) -> Result<Matrix, FetchError> {
    let envelope = serde_json::from_slice::<Envelope>(body);
    if !(200..300).contains(&status) {
        return Err(match envelope {
            Ok(e) => FetchError::Http {
                status,
                error_type: e.error_type,
                error: e.error,
                detail: None,
            },
            Err(_) => FetchError::Http {
                status,
                error_type: None,
                error: None,
                detail: (!body.is_empty()).then(|| excerpt(body, 120)),
            },
        });
    }
    let envelope = envelope.map_err(|e| FetchError::NotJson {
        detail: if body.is_empty() {
            "empty body".to_string()
        } else {
            format!("{e}; body starts with {:?}", excerpt(body, 60))
        },
    })?;
    match envelope.status.as_str() {
        "success" => {}
        "error" => {
            return Err(FetchError::QueryFailed {
                error_type: envelope.error_type.unwrap_or_else(|| "unknown".into()),
                error: envelope.error.unwrap_or_default(),
            });
        }
        other => {
            return Err(FetchError::Malformed {
                detail: format!("unknown status {other:?}"),
            });
        }
    }
    let data = envelope.data.ok_or_else(|| FetchError::Malformed {
        detail: "`data` is missing".into(),
    })?;
    if data.result_type != "matrix" {
        return Err(FetchError::WrongResultType {
            got: data.result_type,
        });
    }
    let raw: Vec<RawSeries> =
        serde_json::from_value(data.result).map_err(|e| FetchError::Malformed {
            detail: format!("`data.result` is not a list of series: {e}"),
        })?;
    let mut m = Matrix {
        series: Vec::with_capacity(raw.len()),
        skipped_non_finite: 0,
        warnings: envelope.warnings,
    };
    for mut s in raw {
        let metric_name = s.metric.remove("__name__");
        let mut points = Vec::with_capacity(s.values.len());
        for (t, v) in &s.values {
            let value: f64 = v.parse().map_err(|_| FetchError::Malformed {
                detail: format!("value {:?} is not a number", excerpt(v.as_bytes(), 40)),
            })?;
            if !t.is_finite() {
                return Err(FetchError::Malformed {
                    detail: format!("timestamp {t} is not finite"),
                });
            }
            if value.is_finite() {
                points.push(((t * 1000.0).round() as TsMs, value));
            } else {
                m.skipped_non_finite += 1;
            }
        }
        points.sort_by_key(|p| p.0);
        m.series.push(Series {
            labels: s.metric.into_iter().collect(),
            metric_name,
            points,
        });
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(body: &str) -> Matrix {
        parse_query_range(200, body.as_bytes()).expect("parses")
    }

    fn err(status: u16, body: &str) -> FetchError {
        parse_query_range(status, body.as_bytes()).expect_err("fails")
    }

    #[test]
    fn matrix_with_labels_and_values() {
        let m = ok(
            r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{"__name__":"training_step","rank":"1","gpu":"0"},
             "values":[[1700000000,"10"],[1700000001.5,"11"]]}]}}"#,
        );
        assert_eq!(m.series.len(), 1);
        let s = &m.series[0];
        assert_eq!(s.metric_name.as_deref(), Some("training_step"));
        assert_eq!(
            s.labels,
            vec![("gpu".into(), "0".into()), ("rank".into(), "1".into())]
        );
        assert_eq!(
            s.points,
            vec![(1_700_000_000_000, 10.0), (1_700_000_001_500, 11.0)]
        );
        assert_eq!(m.skipped_non_finite, 0);
    }

    #[test]
    fn non_finite_values_are_skipped_and_counted() {
        let m = ok(
            r#"{"status":"success","data":{"resultType":"matrix","result":[
            {"metric":{},"values":[[1,"NaN"],[2,"+Inf"],[3,"-Inf"],[4,"0.25"]]}]}}"#,
        );
        assert_eq!(m.series[0].points, vec![(4000, 0.25)]);
        assert_eq!(m.skipped_non_finite, 3);
    }

    #[test]
    fn empty_result_is_not_an_error() {
        let m = ok(r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#);
        assert!(m.series.is_empty());
    }

    #[test]
    fn classified_errors() {
        let e = err(
            400,
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
        );
        assert_eq!(
            e,
            FetchError::Http {
                status: 400,
                error_type: Some("bad_data".into()),
                error: Some("parse error at char 3".into()),
                detail: None
            }
        );
        assert_eq!(err(502, "<html>bad gateway</html>").kind(), "http_5xx");
        assert!(matches!(
            err(200, "<html>hi</html>"),
            FetchError::NotJson { .. }
        ));
        assert!(matches!(err(200, ""), FetchError::NotJson { .. }));
        assert_eq!(
            err(
                200,
                r#"{"status":"error","errorType":"timeout","error":"query timed out"}"#
            ),
            FetchError::QueryFailed {
                error_type: "timeout".into(),
                error: "query timed out".into()
            }
        );
        assert_eq!(
            err(
                200,
                r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#
            ),
            FetchError::WrongResultType {
                got: "vector".into()
            }
        );
        assert_eq!(
            err(
                200,
                r#"{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"x"]]}]}}"#
            )
            .kind(),
            "malformed"
        );
    }

    #[test]
    fn warnings_are_kept() {
        let m = ok(r#"{"status":"success","warnings":["partial"],
            "data":{"resultType":"matrix","result":[]}}"#);
        assert_eq!(m.warnings, vec!["partial".to_string()]);
    }
}
