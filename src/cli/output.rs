//! How the admin commands print their rows: one JSON object per line (the default, for
//! scripts), or an aligned table for a person (`--output table`).

use serde_json::Value;

use super::{write_stdout, CliResult};

/// `--output`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    /// One JSON object per line.
    #[default]
    Json,
    /// A table with a header row, for reading.
    Table,
}

/// The `--output` option of the admin commands.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct OutputArgs {
    /// `json`: one object per line, for scripts; `table`: aligned columns, for reading.
    #[arg(short, long, value_enum, default_value_t = OutputFormat::Json)]
    pub output: OutputFormat,
}

/// Rows of one kind, each a JSON object, and the columns a table shows (in that order).
pub struct Rows {
    columns: &'static [&'static str],
    rows: Vec<Value>,
}

impl Rows {
    /// No rows yet, with the table's `columns` (keys of the rows' objects).
    pub fn new(columns: &'static [&'static str]) -> Self {
        Rows {
            columns,
            rows: Vec::new(),
        }
    }

    /// Adds a row (a JSON object).
    pub fn push(&mut self, row: Value) {
        self.rows.push(row);
    }

    /// Prints the rows on stdout in `format`. A reader that went away (`| head`) is not an
    /// error: what it asked for was written.
    pub fn print(&self, format: OutputFormat) -> CliResult<()> {
        let text = match format {
            OutputFormat::Json => self
                .rows
                .iter()
                .map(|row| format!("{row}\n"))
                .collect::<String>(),
            OutputFormat::Table => self.table(),
        };
        write_stdout(text.as_bytes())
    }

    fn table(&self) -> String {
        let mut table = comfy_table::Table::new();
        table
            .load_preset(comfy_table::presets::NOTHING)
            .set_header(self.columns.iter().map(|c| c.to_uppercase()));
        for row in &self.rows {
            table.add_row(self.columns.iter().map(|c| cell(row.get(*c))));
        }
        // Trailing blanks of the preset's padding are noise at the end of each line.
        let mut text: String = table
            .to_string()
            .lines()
            .map(|line| format!("{}\n", line.trim_end()))
            .collect();
        if self.rows.is_empty() {
            text.push_str("(none)\n");
        }
        text
    }
}

/// A value as a table shows it: strings without quotes, nothing for null, other JSON compact.
fn cell(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_columns_in_the_given_order() {
        let mut rows = Rows::new(&["topic", "queues", "perm"]);
        rows.push(json!({"perm": "RW-", "topic": "Orders", "queues": 8}));
        rows.push(json!({"perm": null, "topic": "T", "queues": 16, "extra": 1}));
        let text = rows.table();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].split_whitespace().eq(["TOPIC", "QUEUES", "PERM"]));
        assert!(lines[1].split_whitespace().eq(["Orders", "8", "RW-"]));
        assert!(lines[2].split_whitespace().eq(["T", "16"]));
        let column = lines[0].find("QUEUES");
        assert_eq!(column, lines[1].find('8'));
        assert_eq!(column, lines[2].find("16"));
    }

    #[test]
    fn an_empty_table_says_so() {
        let text = Rows::new(&["group"]).table();
        assert!(text.ends_with("(none)\n"), "{text}");
    }
}
