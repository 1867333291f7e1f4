//! The webhook receiver (skeleton: being written).

use crate::config::{ReceiverConfig, WebhookConfig};
#[allow(unused_imports)]
use crate::notify::{BuildCtx, Notification, SendError};

pub struct WebhookReceiver {
    _name: String,
}

impl WebhookReceiver {
    pub fn new(cfg: &ReceiverConfig, _c: &WebhookConfig, _ctx: &BuildCtx) -> Result<Self, String> {
        Ok(Self {
            _name: cfg.name.clone(),
        })
    }

    pub async fn send(&self, _n: &Notification) -> Result<(), SendError> {
        Err(SendError::Permanent(
            "the webhook receiver is not written yet".into(),
        ))
    }
}
