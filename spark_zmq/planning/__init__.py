"""Planning, on the driver: discovery -> assignment -> claims, behind the one interface the
reader plans offsets with (``placement.Placement``)."""
