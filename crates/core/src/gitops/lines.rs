//! A file as lines, each keeping its own line ending, and the few line edits the formats make.
//! Edits are recorded against the original lines and applied once, so every line nobody touched
//! comes out byte for byte as it went in.

/// One line: its text without the line ending, and the ending (`\n`, `\r\n`, or empty on a last
/// line without a final newline).
#[derive(Debug, Clone, Copy)]
pub(super) struct Line<'a> {
    pub text: &'a str,
    pub eol: &'a str,
}

pub(super) fn split(text: &str) -> Vec<Line<'_>> {
    text.split_inclusive('\n')
        .map(|piece| match piece.strip_suffix("\r\n") {
            Some(text) => Line { text, eol: "\r\n" },
            None => match piece.strip_suffix('\n') {
                Some(text) => Line { text, eol: "\n" },
                None => Line { text: piece, eol: "" },
            },
        })
        .collect()
}

/// Replacements, removals and insertions by line index.
pub(super) struct Edits<'a> {
    lines: &'a [Line<'a>],
    replaced: Vec<Option<String>>,
    removed: Vec<bool>,
    inserted: Vec<Vec<String>>,
}

impl<'a> Edits<'a> {
    pub fn new(lines: &'a [Line<'a>]) -> Self {
        Edits {
            lines,
            replaced: vec![None; lines.len()],
            removed: vec![false; lines.len()],
            inserted: vec![Vec::new(); lines.len()],
        }
    }

    /// Line `i`'s text becomes `text` (its line ending stays).
    pub fn replace(&mut self, i: usize, text: String) {
        self.replaced[i] = Some(text);
    }

    pub fn remove(&mut self, i: usize) {
        self.removed[i] = true;
    }

    /// A new line after line `i`, ending like line `i` (or like the file, when `i` has no ending).
    pub fn insert_after(&mut self, i: usize, text: String) {
        self.inserted[i].push(text);
    }

    /// The edited file. Only the last line may lack an ending, and whether the file ends in a newline
    /// stays as it was: a line that moves off the end gains the file's ending, one that moves onto
    /// it loses it.
    pub fn finish(self, original: &str) -> String {
        let default_eol = self.lines.iter().map(|l| l.eol).find(|e| !e.is_empty()).unwrap_or("\n");
        let mut out: Vec<(&str, &str)> = Vec::with_capacity(self.lines.len() + 1);
        for (i, line) in self.lines.iter().enumerate() {
            if !self.removed[i] {
                out.push((self.replaced[i].as_deref().unwrap_or(line.text), line.eol));
            }
            let eol = if line.eol.is_empty() { default_eol } else { line.eol };
            out.extend(self.inserted[i].iter().map(|text| (text.as_str(), eol)));
        }
        let final_newline = original.is_empty() || original.ends_with('\n');
        let count = out.len();
        let mut text = String::with_capacity(original.len() + 128);
        for (i, (line, eol)) in out.into_iter().enumerate() {
            text.push_str(line);
            text.push_str(match (i + 1 == count, final_newline) {
                (true, false) => "",
                _ if eol.is_empty() => default_eol,
                _ => eol,
            });
        }
        text
    }
}
