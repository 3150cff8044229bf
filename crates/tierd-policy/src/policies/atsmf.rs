//! PLACEHOLDER: ATSMF (paper 002 §4.2-4.3) is being written (issue 3).

use serde::{Deserialize, Serialize};

use crate::policies::Policy;
use crate::view::{Plan, View};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AtsmfConfig {}

pub struct Atsmf {
    _config: AtsmfConfig,
}

impl Atsmf {
    pub fn new(config: AtsmfConfig) -> Self {
        Self { _config: config }
    }
}

impl Policy for Atsmf {
    fn name(&self) -> &'static str {
        "atsmf"
    }

    fn plan(&mut self, _view: &View) -> Plan {
        Plan::default()
    }
}
