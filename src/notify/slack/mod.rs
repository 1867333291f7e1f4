//! The slack receiver (skeleton: being written).

use crate::config::{ReceiverConfig, SlackConfig};
#[allow(unused_imports)]
use crate::notify::{BuildCtx, Notification, SendError};

pub struct SlackReceiver {
    _name: String,
}

impl SlackReceiver {
    pub fn new(cfg: &ReceiverConfig, _c: &SlackConfig) -> Result<Self, String> {
        Ok(Self {
            _name: cfg.name.clone(),
        })
    }

    pub async fn send(&self, _n: &Notification) -> Result<(), SendError> {
        Err(SendError::Permanent(
            "the slack receiver is not written yet".into(),
        ))
    }
}
