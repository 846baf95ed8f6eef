from shop.models import Run

from tasksapp.engine.handlers import job_handler


@job_handler
def restock(ctx) -> str:
    Run.objects.create(name="restock", value=str(ctx.payload.get("sku", "")))
    return "restocked"
