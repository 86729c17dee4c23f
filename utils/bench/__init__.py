"""The fork against pristine upstream, side by side: `python -m bench` (`make bench`). See README.md here."""
