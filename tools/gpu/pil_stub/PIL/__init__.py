"""A stand-in for Pillow, for a GPU machine without it (the bundle has no room for its wheel):
diffusers imports PIL when it is imported, for image utilities that the group-offloading peer
never calls. Every name is an empty placeholder class. run.sh puts it on the path only where
`import PIL` fails."""
__version__ = "0.0.0"


def __getattr__(name):
    return type(name, (), {})
