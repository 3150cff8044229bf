//! `none`: every segment stays on its home tier. The "HDD only" / "flash only"
//! baselines of papers 000 (Table 4) and 002 (Table 5).

use crate::policies::Policy;
use crate::view::{Plan, View};

#[derive(Debug, Default, Clone, Copy)]
pub struct NonePolicy;

impl Policy for NonePolicy {
    fn name(&self) -> &'static str {
        "none"
    }

    fn plan(&mut self, _view: &View) -> Plan {
        Plan::nothing("policy none: placement changes only by operator moves and pins")
    }
}
