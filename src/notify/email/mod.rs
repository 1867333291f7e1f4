//! The email receiver (skeleton: being written).

use crate::config::{EmailConfig, ReceiverConfig};
#[allow(unused_imports)]
use crate::notify::{BuildCtx, Notification, SendError};

pub struct EmailReceiver {
    _name: String,
}

impl EmailReceiver {
    pub fn new(cfg: &ReceiverConfig, _c: &EmailConfig, _ctx: &BuildCtx) -> Result<Self, String> {
        Ok(Self {
            _name: cfg.name.clone(),
        })
    }

    pub async fn send(&self, _n: &Notification) -> Result<(), SendError> {
        Err(SendError::Permanent(
            "the email receiver is not written yet".into(),
        ))
    }
}
