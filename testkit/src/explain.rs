//! What tests read from the hook's `explain --json` answer.

use serde_json::Value;

/// The `inside` path of every exposure in `explain --json`'s `plan.exposures`, in its order;
/// panics (with the answer) when there is no such list.
pub fn exposed_inside(explain: &Value) -> Vec<String> {
    explain["plan"]["exposures"]
        .as_array()
        .unwrap_or_else(|| panic!("no plan.exposures in {explain}"))
        .iter()
        .map(|e| {
            e["inside"]
                .as_str()
                .unwrap_or_else(|| panic!("an exposure without inside: {e}"))
                .to_string()
        })
        .collect()
}
