"""What every build step shares: the build report and its timed steps, the wheelhouse, venvs, the toolchain, build variables and job sizing, the compiler cache and the sdist."""
