//! The Parquet form of a sweep file: the same rows and columns as the CSV,
//! typed (text, 64-bit integers, doubles; an empty field is null), one row
//! group, written with the `parquet` crate (no Arrow, no compression) so
//! that the CLI needs no Python and every executor writes the same bytes.

use std::sync::Arc;

use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

use crate::LabError;

/// How a column is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Text,
    Integer,
    Double,
}

/// The kind of a sweep column, by name.
pub fn kind(column: &str) -> Kind {
    match column {
        "cell_id" | "trace" | "format" | "volume" | "tiers" | "policy" | "fast_bytes_spec"
        | "trace_format" | "replay" => Kind::Text,
        "speed" | "hit_ratio" | "miss_ratio" | "fast_io_share" | "avg_iops" => Kind::Double,
        name if name.ends_with("_us") => Kind::Double,
        _ => Kind::Integer,
    }
}

fn error(path: &std::path::Path, cause: impl std::fmt::Display) -> LabError {
    LabError(format!("{}: cannot write Parquet: {cause}", path.display()))
}

/// Writes `rows` (fields as the CSV has them) under `columns`.
pub fn write(
    path: &std::path::Path,
    columns: &[&str],
    rows: &[Vec<String>],
) -> Result<(), LabError> {
    let mut message = String::from("message tierd_sweep {\n");
    for column in columns {
        let kind = match kind(column) {
            Kind::Text => "BYTE_ARRAY",
            Kind::Integer => "INT64",
            Kind::Double => "DOUBLE",
        };
        let annotation = if kind == "BYTE_ARRAY" { " (UTF8)" } else { "" };
        message.push_str(&format!("  OPTIONAL {kind} {column}{annotation};\n"));
    }
    message.push('}');
    let schema = Arc::new(parse_message_type(&message).map_err(|cause| error(path, cause))?);
    let properties = Arc::new(
        WriterProperties::builder()
            .set_created_by("tierd sweep".to_string())
            .build(),
    );
    let temporary = std::path::PathBuf::from(format!("{}.tmp", path.display()));
    let file = std::fs::File::create(&temporary).map_err(|cause| error(path, cause))?;
    let mut writer =
        SerializedFileWriter::new(file, schema, properties).map_err(|cause| error(path, cause))?;
    let mut group = writer
        .next_row_group()
        .map_err(|cause| error(path, cause))?;
    let mut index = 0;
    while let Some(mut column) = group.next_column().map_err(|cause| error(path, cause))? {
        let name = columns[index];
        let fields: Vec<&str> = rows
            .iter()
            .map(|row| row.get(index).map_or("", String::as_str))
            .collect();
        let levels: Vec<i16> = fields
            .iter()
            .map(|field| i16::from(!field.is_empty()))
            .collect();
        let present = fields.iter().filter(|field| !field.is_empty());
        let bad = |field: &str| error(path, format!("column {name}: {field:?} is not a number"));
        match kind(name) {
            Kind::Text => {
                let values: Vec<ByteArray> = present.map(|field| ByteArray::from(*field)).collect();
                column
                    .typed::<ByteArrayType>()
                    .write_batch(&values, Some(&levels), None)
                    .map_err(|cause| error(path, cause))?;
            }
            Kind::Integer => {
                let values = present
                    .map(|field| field.parse::<i64>().map_err(|_| bad(field)))
                    .collect::<Result<Vec<_>, _>>()?;
                column
                    .typed::<Int64Type>()
                    .write_batch(&values, Some(&levels), None)
                    .map_err(|cause| error(path, cause))?;
            }
            Kind::Double => {
                let values = present
                    .map(|field| field.parse::<f64>().map_err(|_| bad(field)))
                    .collect::<Result<Vec<_>, _>>()?;
                column
                    .typed::<DoubleType>()
                    .write_batch(&values, Some(&levels), None)
                    .map_err(|cause| error(path, cause))?;
            }
        }
        column.close().map_err(|cause| error(path, cause))?;
        index += 1;
    }
    group.close().map_err(|cause| error(path, cause))?;
    writer.close().map_err(|cause| error(path, cause))?;
    std::fs::rename(&temporary, path).map_err(|cause| error(path, cause))?;
    Ok(())
}
