//! Receivers and a daemon rig for the notification tests: a real Alertmanager
//! (`alertmanager`), a `gpuwatch run` daemon on the simulated library (`daemon_rig`, which
//! uses `slack_server`), a Slack-like webhook server (`slack_server`) and a real SMTP server
//! (`smtp`, running `smtp_auth.py`). Use them as `crate::notify_support::slack_server::...`.

pub mod alertmanager;
pub mod daemon_rig;
pub mod slack_server;
pub mod smtp;
