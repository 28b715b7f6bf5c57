from dspy_hero.cli.app import main

main()
