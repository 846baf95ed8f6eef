from django.db import migrations

# The trigger as this migration installs it: its own text, never the live code's, so a
# fresh install and an upgraded one end with the same function. A later change to the
# trigger is a new migration.
INSTALL = """
CREATE OR REPLACE FUNCTION tasksapp_job_notify() RETURNS trigger AS $$
BEGIN
  IF NEW.state IN ('scheduled', 'failed') THEN
    IF NEW.run_at < clock_timestamp() + interval '900 seconds' THEN
      PERFORM pg_notify('tempo_jobs',
        NEW.id::text || ':' || floor(extract(epoch FROM NEW.run_at) * 1000)::bigint::text);
    END IF;
  ELSE
    PERFORM pg_notify('tempo_jobs', NEW.id::text || ':x');
  END IF;
  RETURN NULL;
END
$$ LANGUAGE plpgsql;

DROP TRIGGER IF EXISTS tasksapp_job_notify ON tasksapp_job;
CREATE TRIGGER tasksapp_job_notify
AFTER INSERT OR UPDATE OF state, run_at ON tasksapp_job
FOR EACH ROW
WHEN (NEW.state IN ('scheduled', 'failed', 'cancelled'))
EXECUTE FUNCTION tasksapp_job_notify();
"""

REMOVE = """
DROP TRIGGER IF EXISTS tasksapp_job_notify ON tasksapp_job;
DROP FUNCTION IF EXISTS tasksapp_job_notify();
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(INSTALL)


def remove(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(REMOVE)


class Migration(migrations.Migration):
    """Announce due work to dispatchers (LISTEN/NOTIFY) from every path that writes it."""

    dependencies = [("tasksapp", "0001_jobs")]
    operations = [migrations.RunPython(install, remove)]
