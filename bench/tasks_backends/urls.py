"""The bench project serves no pages; Django's checks want a URLconf."""

urlpatterns: list = []
