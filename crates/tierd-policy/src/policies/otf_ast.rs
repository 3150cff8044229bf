//! PLACEHOLDER: OTF-AST (paper 000 §4.2, §5.4) is being written (issue 3).

use serde::{Deserialize, Serialize};

use crate::policies::Policy;
use crate::view::{Plan, View};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OtfAstConfig {}

pub struct OtfAst {
    _config: OtfAstConfig,
}

impl OtfAst {
    pub fn new(config: OtfAstConfig) -> Self {
        Self { _config: config }
    }
}

impl Policy for OtfAst {
    fn name(&self) -> &'static str {
        "otf-ast"
    }

    fn plan(&mut self, _view: &View) -> Plan {
        Plan::default()
    }
}
