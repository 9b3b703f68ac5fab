//! Parameters bound from one struct per statement, checked against the statement itself.
//!
//! A statement with many positional parameters declares them in its leading comment, on a
//! line starting `-- params:` (continued on the next `--` lines that name more), one
//! `$n name` each, the name being the field that binds it:
//!
//! ```sql
//! -- params: $1 ids, $2 attempts, $3 segments, …
//! ```
//!
//! The struct lists its fields once, in [`bind_params!`], which yields both the values in
//! `$n` order (what `query` takes) and their names; a unit test per statement compares the
//! names with the declaration ([`assert_declared`]). Reordering the struct's list or the
//! statement's parameters without the other fails that test, instead of binding job ids as
//! attempts (types alone do not catch two `int[]` swapped).

/// Implements, for `$ty`, one method per statement returning the listed fields as that
/// statement's parameters (in `$n` order), and an associated const naming them.
macro_rules! bind_params {
    ($ty:ty { $(fn $method:ident, const $names:ident = [$($field:ident),+ $(,)?];)+ }) => {
        impl $ty {
            $(
                /// The names of the fields `$method` binds, in `$n` order.
                #[cfg(test)]
                pub(crate) const $names: &'static [&'static str] = &[$(stringify!($field)),+];

                pub(crate) fn $method(
                    &self,
                ) -> [&(dyn tokio_postgres::types::ToSql + Sync);
                       <[()]>::len(&[$($crate::bound_params::bind_params!(@unit $field)),+])] {
                    [$(&self.$field),+]
                }
            )+
        }
    };
    (@unit $field:ident) => {
        ()
    };
}
pub(crate) use bind_params;

/// The parameter names `sql` declares on its `-- params:` lines, in `$n` order. Panics,
/// naming the problem, when there is no declaration, the numbers do not run `$1, $2, …`,
/// or the statement's body uses a parameter beyond the last declared.
#[cfg(test)]
pub(crate) fn declared(sql: &str) -> Vec<String> {
    let mut lines = sql.lines().skip_while(|l| !l.starts_with("-- params:"));
    let first = lines.next().expect("no `-- params:` line in the statement");
    let text: Vec<&str> = std::iter::once(first)
        .chain(lines.take_while(|l| l.starts_with("--") && l.contains('$')))
        .collect();
    let mut names = Vec::new();
    for line in &text {
        let mut rest = *line;
        while let Some(at) = rest.find('$') {
            rest = &rest[at + 1..];
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            let n: usize = digits.parse().expect("`$` followed by a parameter number");
            assert_eq!(n, names.len() + 1, "parameter ${n} out of order in: {line}");
            let name: String = rest[digits.len()..]
                .trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(!name.is_empty(), "parameter ${n} has no name in: {line}");
            names.push(name);
        }
    }
    let body: String = sql
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    let highest = body
        .split('$')
        .skip(1)
        .filter_map(|s| {
            let d: String = s.chars().take_while(char::is_ascii_digit).collect();
            d.parse::<usize>().ok()
        })
        .max()
        .unwrap_or(0);
    assert_eq!(
        highest,
        names.len(),
        "the statement uses ${highest} but declares {} parameters",
        names.len()
    );
    names
}

/// Asserts that `sql` declares exactly `fields`, in this order.
#[cfg(test)]
pub(crate) fn assert_declared(sql: &str, fields: &[&str]) {
    assert_eq!(
        declared(sql),
        fields,
        "the statement's `-- params:` header and the struct binding it disagree"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Two {
        a: Vec<i64>,
        b: Option<String>,
    }
    bind_params!(Two {
        fn params, const PARAMS = [a, b];
    });

    #[test]
    fn the_macro_binds_in_the_listed_order_and_names_the_fields() {
        let two = Two {
            a: vec![1],
            b: None,
        };
        assert_eq!(two.params().len(), 2);
        assert_eq!(Two::PARAMS, ["a", "b"]);
    }

    #[test]
    fn a_header_is_read_across_lines() {
        let sql = "-- what it does\n-- params: $1 a, $2 b,\n--   $3 c_d (why)\n-- more prose\n\
                   SELECT $1, $2, $3";
        assert_eq!(declared(sql), ["a", "b", "c_d"]);
    }

    #[test]
    #[should_panic(expected = "declares 2 parameters")]
    fn a_parameter_the_header_misses_fails() {
        declared("-- params: $1 a, $2 b\nSELECT $1, $2, $3");
    }

    #[test]
    #[should_panic(expected = "out of order")]
    fn numbers_must_run_in_order() {
        declared("-- params: $2 b, $1 a\nSELECT $1, $2");
    }

    #[test]
    #[should_panic(expected = "disagree")]
    fn a_swapped_struct_fails() {
        assert_declared("-- params: $1 a, $2 b\nSELECT $1, $2", &["b", "a"]);
    }
}
