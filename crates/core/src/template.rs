//! The exec runner's argument templates: `{name}` is a placeholder, `{{` and `}}` are literal
//! braces (so a shell's `{ …; }` or `${X}` can be written), any other brace is literal text.
//! One grammar for the config's validation and the runner's expansion.

/// A template argument that cannot be read: a `{` that no `}` closes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{{` without a closing `}}` in {arg:?}; write {{{{ and }}}} for literal braces")]
pub struct Unclosed {
    pub arg: String,
}

/// One part of a template argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<'a> {
    Text(&'a str),
    Placeholder(&'a str),
}

/// The pieces of `arg`, in order (an escaped brace is a one-character text piece).
pub fn pieces(arg: &str) -> Result<Vec<Piece<'_>>, Unclosed> {
    let mut out = Vec::new();
    let mut rest = arg;
    loop {
        let Some(at) = rest.find(['{', '}']) else {
            if !rest.is_empty() {
                out.push(Piece::Text(rest));
            }
            return Ok(out);
        };
        if at > 0 {
            out.push(Piece::Text(&rest[..at]));
        }
        let after = &rest[at + 1..];
        if rest[at..].starts_with("{{") || rest[at..].starts_with("}}") {
            out.push(Piece::Text(&rest[at..at + 1]));
            rest = &after[1..];
        } else if rest[at..].starts_with('}') {
            out.push(Piece::Text("}"));
            rest = after;
        } else {
            let close = after.find('}').ok_or_else(|| Unclosed { arg: arg.to_string() })?;
            out.push(Piece::Placeholder(&after[..close]));
            rest = &after[close + 1..];
        }
    }
}

/// `arg` with each placeholder replaced by `value(name)` (left as written when it has none) and
/// escaped braces made single. An unreadable argument is left as written (the config refuses
/// those, and unknown names).
pub fn expand<'v>(arg: &str, value: impl Fn(&str) -> Option<&'v str>) -> String {
    let Ok(pieces) = pieces(arg) else { return arg.to_string() };
    let mut out = String::with_capacity(arg.len());
    for piece in pieces {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Placeholder(name) => match value(name) {
                Some(value) => out.push_str(value),
                None => {
                    out.push('{');
                    out.push_str(name);
                    out.push('}');
                }
            },
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(name: &str) -> Option<&'static str> {
        match name {
            "image" => Some("reg/app:1"),
            "X" => Some("not-a-placeholder-value"),
            _ => None,
        }
    }

    #[test]
    fn placeholders_are_filled_and_doubled_braces_are_literal() {
        assert_eq!(expand("--tag={image}", values), "--tag=reg/app:1");
        assert_eq!(expand("{{ echo {image}; }}", values), "{ echo reg/app:1; }");
        assert_eq!(expand("${{X}}", values), "${X}");
        assert_eq!(expand("a}b", values), "a}b");
        assert_eq!(expand("{{{image}}}", values), "{reg/app:1}");
        assert_eq!(expand("{unknown}", values), "{unknown}");
    }

    #[test]
    fn pieces_name_the_placeholders_and_refuse_an_unclosed_brace() {
        let names = |arg| -> Vec<&str> {
            pieces(arg)
                .unwrap()
                .into_iter()
                .filter_map(|p| match p {
                    Piece::Placeholder(n) => Some(n),
                    Piece::Text(_) => None,
                })
                .collect()
        };
        assert_eq!(names("{image}:{change_id}"), ["image", "change_id"]);
        assert!(names("{{ x; }} ${{HOME}}").is_empty());
        let err = pieces("sh -c {echo").unwrap_err();
        assert!(err.to_string().contains("write {{ and }} for literal braces"), "{err}");
    }
}
