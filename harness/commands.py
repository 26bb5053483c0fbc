"""Foundation subcommands: validate, install, model, up, ps, down, pin, run."""


def register(sub) -> None:
    pass
