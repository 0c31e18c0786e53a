from ddtree_patch.cli import main

main()
