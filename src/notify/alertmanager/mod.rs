//! The alertmanager receiver (skeleton: being written).

use crate::config::{AlertmanagerConfig, ReceiverConfig};
#[allow(unused_imports)]
use crate::notify::{BuildCtx, Notification, SendError};

pub struct AlertmanagerReceiver {
    _name: String,
}

impl AlertmanagerReceiver {
    pub fn new(
        cfg: &ReceiverConfig,
        _c: &AlertmanagerConfig,
        _ctx: &BuildCtx,
    ) -> Result<Self, String> {
        Ok(Self {
            _name: cfg.name.clone(),
        })
    }

    pub async fn send(&self, _n: &Notification) -> Result<(), SendError> {
        Err(SendError::Permanent(
            "the alertmanager receiver is not written yet".into(),
        ))
    }
}
