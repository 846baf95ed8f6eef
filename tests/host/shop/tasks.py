import time
from pathlib import Path

from django_tasks import task
from shop.models import Run


class OutOfStock(Exception):
    pass


@task
def add(a: int, b: int, label: str = "add") -> int:
    Run.objects.create(name=label, value=str(a + b))
    return a + b


@task(takes_context=True)
def report(context, name: str) -> dict:
    Run.objects.create(name="report", value=name)
    return {"name": name, "attempt": context.attempt}


@task
def reserve(sku: str) -> None:
    raise OutOfStock(f"{sku} is out of stock")


@task
def hold(label: str, marker: str) -> str:
    """Writes its row, then blocks on its first run (its worker is SIGKILLed meanwhile):
    the row of the killed run rolls back with its transaction."""
    Run.objects.create(name=label)
    first = not Path(marker).exists()
    Path(marker).touch()
    if first:
        time.sleep(600)
    return label


def not_a_task(a: int) -> int:
    """A plain function: never run through the Tasks API."""
    Run.objects.create(name="not_a_task")
    return a
