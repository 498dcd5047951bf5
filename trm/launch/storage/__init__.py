"""Copying a run to object storage with rclone (SYNC_TO) while it trains, and bringing it back on a new machine."""
