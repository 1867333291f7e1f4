//! A basic-auth password from an environment variable never shows in an error's Display or
//! Debug, even when the server echoes the request's `Authorization` header. The variable is
//! set for the test process by `.cargo/config.toml`'s `[env]` (setting it here would race the
//! other tests' threads).

use gpuwatch::config::{PrometheusAuth, SecretSource};
use gpuwatch::training::{Role, TrainingFetcher};

use crate::training_support::{Canned, CannedServer, HOST, config};

const T: i64 = 1_750_000_000_000;
const PASSWORD: &str = "pw-1a2b3c4d-SECRET";

#[tokio::test]
async fn a_basic_auth_password_from_the_environment_never_appears_in_errors() {
    let var = "GPUWATCH_TEST_PROM_PASSWORD";
    assert_eq!(
        std::env::var(var).as_deref(),
        Ok(PASSWORD),
        "run through cargo: .cargo/config.toml sets {var}"
    );
    let s = CannedServer::start(vec![Canned::Echo(403)]);
    let mut cfg = config(&s.url);
    cfg.auth = PrometheusAuth::Basic {
        username: "gpuwatch".into(),
        password: SecretSource::Env(var.into()),
    };
    let f = TrainingFetcher::new(&cfg, HOST).expect("fetcher");
    assert!(
        !format!("{f:?}").contains(PASSWORD),
        "the fetcher's Debug hides the secret"
    );
    let e = f
        .fetch_role(Role::Loss, T - 60_000, T)
        .await
        .expect_err("fails");
    assert_eq!(e.kind(), "http_4xx");
    assert!(
        s.requests()[0].contains("authorization: Basic "),
        "basic auth was sent"
    );
    // The echoed header carries base64("gpuwatch:" + password): scrubbed as well.
    assert!(e.to_string().contains("authorization: Basic ***"), "{e}");
    assert!(!e.to_string().contains(PASSWORD) && !format!("{e:?}").contains(PASSWORD));
    let missing = "GPUWATCH_TEST_PROM_UNSET";
    cfg.auth = PrometheusAuth::Basic {
        username: "u".into(),
        password: SecretSource::Env(missing.into()),
    };
    let e = TrainingFetcher::new(&cfg, HOST).expect_err("env var missing");
    assert_eq!(
        e.to_string(),
        format!("cannot read the password from environment variable {missing}: it is not set")
    );
}
