"""`mma2a features FILE... [--json]`: what the extractors find in each file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from .root import app


def _describe(path: Path, modality: str | None, budget: float, pipeline: Any) -> dict[str, Any]:
    from ..errors import MMA2AError
    from ..features.producer import sniff_modality

    out: dict[str, Any] = {"file": str(path)}
    try:
        data = path.read_bytes()
    except OSError as exc:
        out["error"] = f"{path}: cannot read: {exc.strerror or exc}"
        return out
    try:
        mod = modality or sniff_modality(data, path.name)
        result = pipeline.extract_blocking(mod, data, budget_s=budget)
    except MMA2AError as exc:
        out["error"] = exc.message
        return out
    out.update(
        modality=mod,
        features=result.features,
        featureSchema=result.schema,
        featureSource=result.source.to_json() if result.source else None,
        thumbnail={"mediaType": result.thumbnail.media_type, "bytes": len(result.thumbnail.data)} if result.thumbnail else None,
        errors=result.errors,
        skipped=result.skipped,
        timedOut=result.timed_out,
    )
    if result.source is None and not result.errors and not result.skipped:  # nothing ran: say so, not just `{}`
        out["skipped"] = [f"features: no extractor reads {mod}; nothing extracted (--modality sets the type)"]
    return out


def _table(row: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"{row['file']} ({row.get('modality', '?')})", show_header=True, title_justify="left")
    table.add_column("feature", style="bold")
    table.add_column("value")
    for key, value in (row.get("features") or {}).items():
        table.add_row(key, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    if row.get("featureSource"):
        src = row["featureSource"]
        table.add_row("[dim]source[/dim]", f"{src.get('extractor', '')} {src.get('version', '')}")
    if row.get("thumbnail"):
        table.add_row("[dim]thumbnail[/dim]", f"{row['thumbnail']['mediaType']}, {row['thumbnail']['bytes']} bytes")
    for note in (row.get("errors") or []) + (row.get("skipped") or []):
        table.add_row("[yellow]note[/yellow]", note)
    return table


@app.command("features")
def features_command(
    files: Annotated[list[Path], typer.Argument(help="Files to describe.", show_default=False)],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per file, one per line.")] = False,
    modality: Annotated[str | None, typer.Option("--modality", "-m", help="Override the sniffed modality.")] = None,
    budget: Annotated[float, typer.Option("--budget", help="Seconds allowed per file.")] = 10.0,
    keyword: Annotated[list[str] | None, typer.Option("--keyword", "-k", help="Spoken keyword to listen for (repeatable).")] = None,
    embed: Annotated[bool, typer.Option("--embed", help="Also the sentence embedding of text files (384 numbers).")] = False,
) -> None:
    """Print the features the offline extractors find in each FILE."""
    from rich.console import Console

    from ..errors import MMA2AError
    from ..features import FeaturePipeline, default_extractors

    if budget <= 0:
        typer.echo("error: --budget: must be positive", err=True)
        raise typer.Exit(2)
    if modality:
        from ..modality import parse_modality

        try:
            parse_modality(modality, field="--modality")
        except MMA2AError as exc:
            typer.echo(f"error: {exc.message}", err=True)
            raise typer.Exit(2) from None
    console = Console()
    failed = False
    with FeaturePipeline(default_extractors(keywords=keyword or (), embed=embed)) as pipeline:
        for path in files:
            row = _describe(path, modality, budget, pipeline)
            failed = failed or "error" in row
            if as_json:
                typer.echo(json.dumps(row, ensure_ascii=False))
            elif "error" in row:
                typer.echo(f"error: {row['error']}", err=True)
            else:
                console.print(_table(row))
    if failed:
        raise typer.Exit(1)
