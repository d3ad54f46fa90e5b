//! git's fsck message ids (git 2.39's `FOREACH_FSCK_MSG_ID`), each with its default severity and
//! its name as git prints it and as configuration names it.
//!
//! ```text
//! id (camelCase, as printed)   default   configured as receive.fsck.<id> (case-insensitive)
//! nulInHeader                  fatal     cannot be set to anything but error
//! badDate ...                  error
//! hasDot ...                   warn      an error in strict mode (receive's)
//! badFilemode ...              info      reported as a warning, never refuses by default
//! extraHeaderEntry             ignore
//! ```

/// How much a message matters, in git's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Not reported.
    Ignore,
    /// Reported as a warning; strict mode leaves it a warning.
    Info,
    /// An error that configuration cannot downgrade.
    Fatal,
    /// Refuses the object.
    Error,
    /// Reported; strict mode makes it an error.
    Warn,
}

impl Severity {
    /// The severity for a configuration value (`error`, `warn`, `ignore`), as git parses it.
    pub fn from_config(value: &str) -> Option<Severity> {
        match value {
            "error" => Some(Severity::Error),
            "warn" => Some(Severity::Warn),
            "ignore" => Some(Severity::Ignore),
            _ => None,
        }
    }
}

macro_rules! msg_ids {
    ($($variant:ident $camel:literal $severity:ident,)*) => {
        /// One of git's fsck message ids.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum MsgId {
            $(
                #[doc = concat!("`", $camel, "`")]
                $variant,
            )*
        }

        impl MsgId {
            /// Every id, in git's order.
            pub const ALL: &'static [MsgId] = &[$(MsgId::$variant,)*];

            /// The id as git prints it (`badTimezone`).
            pub fn camel(self) -> &'static str {
                match self {
                    $(MsgId::$variant => $camel,)*
                }
            }

            /// The severity git gives it when nothing is configured (before strict mode).
            pub fn default_severity(self) -> Severity {
                match self {
                    $(MsgId::$variant => Severity::$severity,)*
                }
            }
        }
    };
}

msg_ids! {
    NulInHeader "nulInHeader" Fatal,
    UnterminatedHeader "unterminatedHeader" Fatal,
    BadDate "badDate" Error,
    BadDateOverflow "badDateOverflow" Error,
    BadEmail "badEmail" Error,
    BadName "badName" Error,
    BadObjectSha1 "badObjectSha1" Error,
    BadParentSha1 "badParentSha1" Error,
    BadTimezone "badTimezone" Error,
    BadTree "badTree" Error,
    BadTreeSha1 "badTreeSha1" Error,
    BadType "badType" Error,
    DuplicateEntries "duplicateEntries" Error,
    MissingAuthor "missingAuthor" Error,
    MissingCommitter "missingCommitter" Error,
    MissingEmail "missingEmail" Error,
    MissingNameBeforeEmail "missingNameBeforeEmail" Error,
    MissingObject "missingObject" Error,
    MissingSpaceBeforeDate "missingSpaceBeforeDate" Error,
    MissingSpaceBeforeEmail "missingSpaceBeforeEmail" Error,
    MissingTag "missingTag" Error,
    MissingTagEntry "missingTagEntry" Error,
    MissingTree "missingTree" Error,
    MissingType "missingType" Error,
    MissingTypeEntry "missingTypeEntry" Error,
    MultipleAuthors "multipleAuthors" Error,
    TreeNotSorted "treeNotSorted" Error,
    UnknownType "unknownType" Error,
    ZeroPaddedDate "zeroPaddedDate" Error,
    GitmodulesMissing "gitmodulesMissing" Error,
    GitmodulesBlob "gitmodulesBlob" Error,
    GitmodulesLarge "gitmodulesLarge" Error,
    GitmodulesName "gitmodulesName" Error,
    GitmodulesSymlink "gitmodulesSymlink" Error,
    GitmodulesUrl "gitmodulesUrl" Error,
    GitmodulesPath "gitmodulesPath" Error,
    GitmodulesUpdate "gitmodulesUpdate" Error,
    GitattributesMissing "gitattributesMissing" Error,
    GitattributesLarge "gitattributesLarge" Error,
    GitattributesLineLength "gitattributesLineLength" Error,
    GitattributesBlob "gitattributesBlob" Error,
    EmptyName "emptyName" Warn,
    FullPathname "fullPathname" Warn,
    HasDot "hasDot" Warn,
    HasDotdot "hasDotdot" Warn,
    HasDotgit "hasDotgit" Warn,
    NullSha1 "nullSha1" Warn,
    ZeroPaddedFilemode "zeroPaddedFilemode" Warn,
    NulInCommit "nulInCommit" Warn,
    BadFilemode "badFilemode" Info,
    GitmodulesParse "gitmodulesParse" Info,
    GitignoreSymlink "gitignoreSymlink" Info,
    GitattributesSymlink "gitattributesSymlink" Info,
    MailmapSymlink "mailmapSymlink" Info,
    BadTagName "badTagName" Info,
    MissingTaggerEntry "missingTaggerEntry" Info,
    ExtraHeaderEntry "extraHeaderEntry" Ignore,
}

impl MsgId {
    /// The id for a configuration key's last part, compared as git does: case-insensitively
    /// against the camelCase name (git's "downcased" form).
    pub fn from_config_name(name: &str) -> Option<MsgId> {
        MsgId::ALL
            .iter()
            .copied()
            .find(|id| id.camel().eq_ignore_ascii_case(name))
    }

    /// The index of the id in [`MsgId::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_git_2_39s() {
        assert_eq!(MsgId::ALL.len(), 57);
        for (i, id) in MsgId::ALL.iter().enumerate() {
            assert_eq!(id.index(), i);
        }
        assert_eq!(
            MsgId::from_config_name("BADTIMEZONE"),
            Some(MsgId::BadTimezone)
        );
        assert_eq!(MsgId::from_config_name("nosuchid"), None);
        assert_eq!(MsgId::NulInHeader.default_severity(), Severity::Fatal);
        assert_eq!(MsgId::HasDotgit.camel(), "hasDotgit");
    }
}
