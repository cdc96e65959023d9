"""A progress display for training runs (rich): one bar per run, with its latest accuracy."""

from __future__ import annotations

from types import TracebackType

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn


class TrainingProgress:
    """Context manager; `add` a run, then `advance` it by iterations as records arrive."""

    def __init__(self, iterations: int) -> None:
        self.iterations = iterations
        self._progress = Progress(
            TextColumn("{task.fields[name]:<14}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("acc {task.fields[accuracy]}"), TextColumn("{task.description}"), TimeElapsedColumn(),
            transient=False,
        )

    def __enter__(self) -> TrainingProgress:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.stop()

    def add(self, name: str, description: str = "") -> TaskID:
        return self._progress.add_task(description, total=self.iterations, name=name, accuracy="  -  ")

    def advance(self, task: TaskID, iterations: int, accuracy: float | None) -> None:
        fields = {"accuracy": f"{accuracy:.3f}"} if accuracy is not None else {}
        self._progress.update(task, advance=iterations, **fields)

    def note(self, task: TaskID, description: str) -> None:
        self._progress.update(task, description=description)

    def log(self, message: str) -> None:
        self._progress.console.log(message)
