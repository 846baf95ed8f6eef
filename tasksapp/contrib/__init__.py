"""Optional parts of Tempo, outside its core: each an app a project installs when it
wants it. The engine never imports them; they register themselves with it."""
