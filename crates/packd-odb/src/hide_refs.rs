//! Hidden refs (`transfer.hideRefs`, `receive.hideRefs`, `uploadpack.hideRefs`): refs a server
//! leaves out of its advertisements, and refuses pushes to. A code host hides its
//! `refs/pull/*`: they are read-only to clients, and advertising 100,000 of them to every push
//! would make the push's cost follow the number of refs.
//!
//! Each value is a ref prefix (matching the name itself or anything under it); a leading `!`
//! un-hides; the last matching value wins, as in git.

use crate::config::Config;

/// The hiding rules in force for one service.
#[derive(Debug, Clone, Default)]
pub struct HiddenRefs {
    /// (un-hide, prefix), in configuration order.
    rules: Vec<(bool, String)>,
}

impl HiddenRefs {
    /// The rules for `service` (`"receive"` or `"uploadpack"`): the values of
    /// `transfer.hideRefs` and `<service>.hideRefs` as one list, in the order the
    /// configuration files give them, as git reads them. A `^` after the optional `!` marks a
    /// pattern git matches against the full ref name rather than the namespace-stripped one;
    /// packd serves no namespaces, so the two are the same name and the `^` is dropped.
    pub fn from_config(config: &Config, service: &str) -> HiddenRefs {
        let own = format!("{service}.hideRefs");
        let mut rules = Vec::new();
        for (_, value) in config.get_all_of(&["transfer.hideRefs", &own]) {
            let (unhide, pattern) = match value.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, value),
            };
            let pattern = pattern.strip_prefix('^').unwrap_or(pattern);
            let prefix = pattern.trim_end_matches('/');
            if !prefix.is_empty() {
                rules.push((unhide, prefix.to_string()));
            }
        }
        HiddenRefs { rules }
    }

    /// Whether any ref is hidden at all.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The prefixes under which every ref is hidden (no un-hide rule overlaps them): a listing
    /// may skip them whole.
    pub fn hidden_prefixes(&self) -> Vec<&str> {
        let overlaps = |a: &str, b: &str| {
            a == b
                || (a.starts_with(b) && a.as_bytes().get(b.len()) == Some(&b'/'))
                || (b.starts_with(a) && b.as_bytes().get(a.len()) == Some(&b'/'))
        };
        self.rules
            .iter()
            .filter(|(unhide, p)| !unhide && !self.rules.iter().any(|(u, q)| *u && overlaps(p, q)))
            .map(|(_, p)| p.as_str())
            .collect()
    }

    /// Whether the ref `name` is hidden.
    pub fn is_hidden(&self, name: &str) -> bool {
        for (unhide, prefix) in self.rules.iter().rev() {
            let matches = name == prefix
                || (name.starts_with(prefix.as_str())
                    && name.as_bytes().get(prefix.len()) == Some(&b'/'));
            if matches {
                return !unhide;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_matching_rule_wins() {
        let mut config = Config::default();
        config
            .parse(
                "[transfer]\n\thideRefs = refs/pull\n\thideRefs = !refs/pull/keep\n\
                 [receive]\n\thideRefs = refs/meta/\n",
                "test",
            )
            .unwrap();
        let hidden = HiddenRefs::from_config(&config, "receive");
        assert!(hidden.is_hidden("refs/pull/1/head"));
        assert!(hidden.is_hidden("refs/pull"));
        assert!(!hidden.is_hidden("refs/pull/keep"));
        assert!(!hidden.is_hidden("refs/pull/keep/x"));
        assert!(!hidden.is_hidden("refs/pullx"));
        assert!(hidden.is_hidden("refs/meta/config"));
        assert!(!hidden.is_hidden("refs/heads/main"));
        assert_eq!(hidden.hidden_prefixes(), vec!["refs/meta"]);
        let upload = HiddenRefs::from_config(&config, "uploadpack");
        assert!(!upload.is_hidden("refs/meta/config"));
        assert!(upload.is_hidden("refs/pull/2/head"));
    }

    #[test]
    fn one_list_in_file_order_and_full_name_patterns() {
        let mut config = Config::default();
        config
            .parse(
                "[uploadpack]\n\thideRefs = !refs/pull/2\n\thideRefs = ^refs/keep\n\
                 [transfer]\n\thideRefs = refs/pull\n\thideRefs = !^refs/keep/shown\n",
                "test",
            )
            .unwrap();
        let hidden = HiddenRefs::from_config(&config, "uploadpack");
        // transfer's `refs/pull` comes after uploadpack's `!refs/pull/2`: it wins.
        assert!(hidden.is_hidden("refs/pull/2/head"));
        assert!(hidden.is_hidden("refs/keep/a"));
        assert!(!hidden.is_hidden("refs/keep/shown"));
    }
}
