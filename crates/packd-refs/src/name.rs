//! Which names a push may write: git's receive-pack takes `refs/` followed by a name that
//! `git check-ref-format` accepts without `--allow-onelevel` (so `refs/heads/main`, not
//! `refs/main` nor `HEAD`). Such a name is also a path that stays under `<common>/refs/`: no
//! `..`, no component starting with `.`, none ending with `.lock`, no empty component.

/// Why `name` is not a ref a push may write, or `Ok`.
pub fn check_ref_name(name: &str) -> Result<(), String> {
    let Some(rest) = name.strip_prefix("refs/") else {
        return Err(format!(
            "invalid ref name '{name}': it must start with refs/"
        ));
    };
    if !rest.contains('/') {
        return Err(format!(
            "invalid ref name '{name}': it needs a component after refs/{rest}/"
        ));
    }
    packd_odb::refs::check_ref_format(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ref_names_follow_check_ref_format() {
        for good in [
            "refs/heads/main",
            "refs/tags/v1.0",
            "refs/pull/12/head",
            "refs/a/b@c",
            "refs/tags/@",
        ] {
            assert!(check_ref_name(good).is_ok(), "{good}");
        }
        for bad in [
            "HEAD",
            "refs/a@b",
            "refs/main",
            "../x",
            "/abs",
            "refs/heads/../../x",
            "refs/heads/a..b",
            "refs/heads/a@{1}",
            "refs/heads/a b",
            "refs/heads/a~1",
            "refs/heads/a^",
            "refs/heads/a:b",
            "refs/heads/a?",
            "refs/heads/a*",
            "refs/heads/a[",
            "refs/heads/a\\b",
            "refs/heads/.hidden",
            "refs/heads/x.lock",
            "refs/heads/x.lock/y",
            "refs/heads/x/",
            "refs/heads/x.",
            "refs/heads//x",
            "refs//heads/x",
            "refs/heads/\x01",
        ] {
            assert!(check_ref_name(bad).is_err(), "{bad}");
        }
    }
}
