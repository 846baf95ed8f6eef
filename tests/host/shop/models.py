from django.db import models


class Run(models.Model):
    """One call of a task or handler: what ran, with which value, and when."""

    name = models.CharField(max_length=100)
    value = models.CharField(max_length=100, blank=True, default="")
    at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.name} {self.value}"
